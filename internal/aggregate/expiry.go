package aggregate

import "github.com/ncclprof/ncclprof/internal/event"

// expiry is a FIFO of (time, handle) in the order entries were created: since events arrive
// roughly in time order, expiring pops from the front and touches only what expires, instead of
// scanning every pending map each window. A popped handle may already be gone from its map.
type expiry struct {
	items []aged
	head  int
}

type aged struct {
	t event.Ticks
	h uint64
}

func (q *expiry) push(t event.Ticks, h uint64) { q.items = append(q.items, aged{t, h}) }

func (q *expiry) len() int { return len(q.items) - q.head }

// pop removes and returns the oldest entry when due(t) says so.
func (q *expiry) pop(due func(event.Ticks) bool) (uint64, bool) {
	if q.head == len(q.items) || !due(q.items[q.head].t) {
		return 0, false
	}
	it := q.items[q.head]
	q.head++
	if q.head >= 1024 && q.head*2 >= len(q.items) { // reclaim the consumed front
		q.items = append(q.items[:0], q.items[q.head:]...)
		q.head = 0
	}
	return it.h, true
}

// popAll removes everything (finalize).
func (q *expiry) popAll(f func(uint64)) {
	for _, it := range q.items[q.head:] {
		f(it.h)
	}
	q.items, q.head = q.items[:0], 0
}
