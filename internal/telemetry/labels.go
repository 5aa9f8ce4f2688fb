package telemetry

import (
	"sort"
	"sync"

	"github.com/ncclprof/ncclprof/internal/event"
)

// OtherLabel replaces step labels beyond the limit of distinct labels.
const OtherLabel = "other"

// maxLabelChanges bounds the remembered label changes. Operations complete at most a few
// windows after they start, so only recent changes are ever looked up.
const maxLabelChanges = 4096

// labelHistory remembers when the step label changed, so that an operation is labelled with the
// step it started in, not the one in effect when its window was processed (seconds later).
type labelHistory struct {
	mu       sync.Mutex
	at       []event.Ticks // sorted
	labels   []string
	floor    string // label in effect before at[0] (changes forgotten over the bound)
	known    map[string]bool
	max      int
	overflow uint64
}

func newLabelHistory(max int) *labelHistory {
	return &labelHistory{known: map[string]bool{}, max: max}
}

// set records that label is in effect from time at (same clock as aggregate.Op.Start).
// An empty label clears it. It returns the label as it will be reported.
func (h *labelHistory) set(label string, at event.Ticks) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	if label != "" && !h.known[label] {
		if len(h.known) >= h.max {
			h.overflow++
			label = OtherLabel
		} else {
			h.known[label] = true
		}
	}
	i := sort.Search(len(h.at), func(i int) bool { return h.at[i] > at })
	h.at = append(h.at, 0)
	h.labels = append(h.labels, "")
	copy(h.at[i+1:], h.at[i:])
	copy(h.labels[i+1:], h.labels[i:])
	h.at[i], h.labels[i] = at, label
	if len(h.at) > maxLabelChanges {
		drop := len(h.at) - maxLabelChanges/2
		h.floor = h.labels[drop-1]
		h.at = append(h.at[:0], h.at[drop:]...)
		h.labels = append(h.labels[:0], h.labels[drop:]...)
	}
	return label
}

// lookup returns the label in effect at time t.
func (h *labelHistory) lookup(t event.Ticks) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	i := sort.Search(len(h.at), func(i int) bool { return h.at[i] > t })
	if i == 0 {
		return h.floor
	}
	return h.labels[i-1]
}

func (h *labelHistory) overflowed() uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.overflow
}
