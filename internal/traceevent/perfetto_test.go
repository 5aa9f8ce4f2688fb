package traceevent

import (
	"testing"

	"github.com/ncclprof/ncclprof/internal/jsonscan"
)

// Far from the base, ts and dur rounded apart end a slice a ns past where the next one,
// written at the exact decimal end, starts; PerfettoDur writes the dur that makes them meet.
func TestPerfettoDurMeetsExactly(t *testing.T) {
	const far = 4_458_677_009_853_421 // ns since the base: a real Kineto ts (4.46e12 µs)
	overlaps, fixed := 0, 0
	for d := int64(0); d < 20000; d++ {
		ts, dur := far+d*7, int64(866)+d%13
		end := ts + dur
		durText := string(jsonscan.AppendMicros(nil, dur))
		naive, _ := PerfettoNs(durText)
		if PerfettoOf(ts)+naive > PerfettoOf(end) {
			overlaps++
		}
		if got := PerfettoOf(ts) + PerfettoDur(ts, dur); got != PerfettoOf(end) {
			fixed++
		}
	}
	if overlaps == 0 {
		t.Fatal("no case where rounding ts and dur apart overlaps the next slice: the test does not exercise it")
	}
	if fixed != 0 {
		t.Fatalf("%d slices still do not end where the next begins (of %d that overlapped)", fixed, overlaps)
	}
	t.Logf("%d of 20000 touching pairs overlapped by a ns when rounded apart", overlaps)
	if PerfettoDur(1_000_000, 866) != 866 {
		t.Error("near the base the dur must stay exact")
	}
}
