package aggregate

import (
	"testing"

	"github.com/ncclprof/ncclprof/internal/event"
)

// Issue 23, item 10: with a hang watchdog on, operations that never complete were held
// HoldNs (2 × NCCLPROF_HANG_TIMEOUT_S + 5 s, up to 48 h) and every one a dump listed was pinned
// for ever: with lost stops a job grew by 2 GB and a dump listed 599,368 operations. Past
// HoldMax pending operations a communicator holds nothing beyond MaxAgeNs (what it does without
// a watchdog), pinned or not, and counts what it did not hold; a dump lists at most its limit,
// oldest first, and says how many it left out.
func TestHeldOperationsBounded(t *testing.T) {
	a := newAgg()
	a.HoldNs, a.HoldMax = 1e9, 100 // hold 1 s (1000 × MaxAgeNs), at most 100 operations
	var b builder
	const n = 1000
	for i := 0; i < n; i++ { // one operation every 10 µs whose stop never comes
		r := coll(b.id(), "AllReduce", 64, event.Ticks(1000+10_000*i), 0)
		r.Flags = event.Open
		a.Window(comm1, []event.Record{r})
		if i == 50 { // 51 pending, under HoldMax
			_, open, notListed := a.InFlight(comm1, 32) // a dump pins what it lists
			if len(open) != 32 || notListed != 19 || open[0].Start != 1000 || open[31].Start != 1000+31*10_000 {
				t.Fatalf("dump: %d listed (from %d), %d not listed; want the 32 oldest, 19 left out",
					len(open), open[0].Start, notListed)
			}
		}
	}
	last := event.Ticks(1000 + 10_000*(n-1))
	a.Advance(comm1, last+1)
	cs := a.comms[comm1.Index]
	// Held: what MaxAgeNs (1 ms = 100 operations) keeps, whatever the hold and the pins.
	if len(cs.ops) > 101 {
		t.Errorf("%d operations held, want at most MaxAgeNs' worth (101): the hold is not bounded", len(cs.ops))
	}
	if got := cs.res.Health.NotHeld; got != uint64(n-len(cs.ops)) {
		t.Errorf("not_held %d, want the %d given up early", got, n-len(cs.ops))
	}

	// Under the bound the watchdog's hold applies: 50 operations outlive MaxAgeNs.
	a = newAgg()
	a.HoldNs, a.HoldMax = 1e9, 100
	for i := 0; i < 50; i++ {
		r := coll(b.id(), "AllReduce", 64, event.Ticks(1000+10_000*i), 0)
		r.Flags = event.Open
		a.Window(comm1, []event.Record{r})
	}
	a.Advance(comm1, 1e8)
	if cs := a.comms[comm1.Index]; len(cs.ops) != 50 || cs.res.Health.NotHeld != 0 {
		t.Errorf("%d held (want 50), not_held %d (want 0)", len(cs.ops), cs.res.Health.NotHeld)
	}
}
