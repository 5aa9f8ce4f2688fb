// Package envnum reads the numeric settings of environment variables with one rule for all: a
// value that is not a finite number inside its range (NaN, ±Inf, a negative count, a duration
// that would overflow) is refused with one message naming the range and the default it falls
// back to, and the default is used. Nothing a variable says can turn into a negative timeout,
// a timer that fires on every pass or an allocation sized by a typo.
package envnum

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Int is the integer value v of variable name (decimal), or def with a message when v is not an
// integer in [lo, hi]. An empty v gives def and no message.
func Int(name, v string, def, lo, hi int64) (int64, string) {
	s := strings.TrimSpace(v)
	if s == "" {
		return def, ""
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < lo || n > hi {
		return def, fmt.Sprintf("%s=%q is not a whole number in [%d, %d]; using %d", name, v, lo, hi, def)
	}
	return n, ""
}

// Float is the value v of variable name, or def with a message when v is not a finite number
// in [lo, hi] (NaN and infinities included: every comparison with NaN is false, so a range
// check alone lets it through).
func Float(name, v string, def, lo, hi float64) (float64, string) {
	s := strings.TrimSpace(v)
	if s == "" {
		return def, ""
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) || f < lo || f > hi {
		return def, fmt.Sprintf("%s=%q is not a number in [%g, %g]; using %g", name, v, lo, hi, def)
	}
	return f, ""
}

// Millis is a duration given in whole milliseconds in [lo, hi] (both in ms), default def ms; hi
// must keep hi·1 ms inside time.Duration, which Millis checks.
func Millis(name, v string, def, lo, hi int64) (time.Duration, string) {
	hi = min(hi, math.MaxInt64/int64(time.Millisecond))
	n, msg := Int(name, v, def, lo, hi)
	return time.Duration(n) * time.Millisecond, msg
}
