package commops

import "testing"

// Busy time is the union of the operations' intervals: overlapping and nested operations count
// once, gaps not at all; the sum is kept beside it. Untimed operations are left out.
func TestBusyIsTheUnion(t *testing.T) {
	op := func(proc int32, start, end int64) Op {
		return Op{Proc: proc, Source: Completion, Arrive: start, Done: end, Time: end - start}
	}
	s := &Set{Procs: make([]Proc, 3), Ops: []Op{
		op(0, 1000, 1010), op(0, 1005, 1015), op(0, 1020, 1030), // overlap, then a gap
		op(1, 2000, 2010), op(1, 2002, 2004), // nested
		{Proc: 1, Source: NoTime, Arrive: 2500}, // no time: not counted
		op(1, 2010, 2020),                       // touching
	}}
	got := s.BusyByProc()
	want := []Busy{
		{Ops: 3, BusyNs: 25, SumNs: 30, SpanNs: 30},
		{Ops: 3, BusyNs: 20, SumNs: 22, SpanNs: 20},
		{},
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("proc %d: %+v, want %+v", i, got[i], want[i])
		}
	}
}
