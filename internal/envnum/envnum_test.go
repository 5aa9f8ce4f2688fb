package envnum

import (
	"strings"
	"testing"
	"time"
)

// Every hostile spelling of a number falls back to the default with one message naming the
// variable; every valid one is taken as it is.
func TestFloatRejectsNonFiniteAndOutOfRange(t *testing.T) {
	for _, v := range []string{"NaN", "nan", "-nan", "Inf", "+Inf", "-Inf", "infinity", "1e400", "-1",
		"0.5", "86401", "1e9", "", "x", "60s", "0x10"} {
		got, msg := Float("NCCLPROF_HANG_TIMEOUT_S", v, 60, 1, 86400)
		if v == "" {
			if got != 60 || msg != "" {
				t.Errorf("unset: %v %q", got, msg)
			}
			continue
		}
		if got != 60 || !strings.Contains(msg, `NCCLPROF_HANG_TIMEOUT_S="`+v+`" is not a number in [1, 86400]; using 60`) {
			t.Errorf("%q: got %v, message %q", v, got, msg)
		}
	}
	for v, want := range map[string]float64{"1": 1, "2.5": 2.5, " 86400 ": 86400, "1e2": 100} {
		if got, msg := Float("X", v, 60, 1, 86400); got != want || msg != "" {
			t.Errorf("%q: got %v %q, want %v", v, got, msg, want)
		}
	}
}

func TestIntBounds(t *testing.T) {
	for _, v := range []string{"-1", "0", "257", "9223372036854775808", "1.5", "NaN", "Inf", "2x"} {
		if got, msg := Int("NCCLPROF_GOMAXPROCS", v, 2, 1, 256); got != 2 || !strings.Contains(msg, "[1, 256]; using 2") {
			t.Errorf("%q: got %v %q", v, got, msg)
		}
	}
	if got, msg := Int("X", "256", 2, 1, 256); got != 256 || msg != "" {
		t.Errorf("256: %v %q", got, msg)
	}
}

// A number of milliseconds that would overflow time.Duration (which wrapped negative: a timer
// that panics, a deadline already past) is refused, whatever upper bound the caller gave.
func TestMillisNeverOverflows(t *testing.T) {
	d, msg := Millis("OTEL_METRIC_EXPORT_INTERVAL", "10000000000000", 60000, 1, 1<<62)
	if d != time.Minute || msg == "" {
		t.Errorf("overflowing value: %v %q", d, msg)
	}
	if d, msg := Millis("X", "9223372036854", 1, 1, 1<<62); d <= 0 || msg != "" {
		t.Errorf("largest representable: %v %q", d, msg)
	}
}
