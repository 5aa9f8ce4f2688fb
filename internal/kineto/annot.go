package kineto

import "sort"

// Annotation is a collective's record_function (nccl:* or record_param_comms) with what
// PyTorch recorded on it, times in Unix ns once Annotations.Finish has run.
type Annotation struct {
	Start, End int64
	Comms      CommsArgs
}

// Annotations indexes the collective record_functions of a trace by thread, to find the one
// around a kernel's launch call: older traces carry a collective's count and dtype there
// rather than on the kernel.
type Annotations struct {
	byThread map[[2]int64][]Annotation
	// read holds them in file order until Finish, in blocks: a slice grown by appending
	// allocated five times its final size (Go grows large slices by a quarter).
	read [][]threadAnnotation
}

type threadAnnotation struct {
	thread [2]int64
	Annotation
}

// Add keeps e if it is a collective record_function on a numeric thread.
func (a *Annotations) Add(e *Event) {
	var c CommsArgs
	var ok bool
	if e.Decoded != nil {
		c, ok = e.Decoded.Comms, e.Decoded.Annotation
	} else {
		c, ok = e.AnnotationComms()
	}
	if !ok || e.Pid.IsStr || e.Tid.IsStr {
		return
	}
	if len(a.read) == 0 || len(a.read[len(a.read)-1]) == cap(a.read[len(a.read)-1]) {
		a.read = append(a.read, make([]threadAnnotation, 0, 1024))
	}
	last := &a.read[len(a.read)-1]
	*last = append(*last, threadAnnotation{[2]int64{e.Pid.Num, e.Tid.Num}, Annotation{Start: e.Ts, End: e.Ts + e.Dur, Comms: c}})
}

// Finish puts the times on Unix ns and sorts each thread's annotations.
func (a *Annotations) Finish(t *Trace) {
	count := map[[2]int64]int{}
	for _, b := range a.read {
		for i := range b {
			count[b[i].thread]++
		}
	}
	a.byThread = make(map[[2]int64][]Annotation, len(count))
	for th, n := range count {
		a.byThread[th] = make([]Annotation, 0, n)
	}
	for _, b := range a.read {
		for i := range b {
			as := append(a.byThread[b[i].thread], b[i].Annotation)
			as[len(as)-1].Start, as[len(as)-1].End = t.Unix(b[i].Start), t.Unix(b[i].End)
			a.byThread[b[i].thread] = as
		}
	}
	a.read = nil
	for _, as := range a.byThread {
		sort.Slice(as, func(i, j int) bool { return as[i].Start < as[j].Start })
	}
}

// Around returns the innermost annotation on a thread that contains [start, end] (a launch
// call), or nil.
func (a *Annotations) Around(pid, tid, start, end int64) *Annotation {
	as := a.byThread[[2]int64{pid, tid}]
	i := sort.Search(len(as), func(i int) bool { return as[i].Start > start }) - 1
	// The innermost is the latest-starting one that contains the call; nesting is shallow.
	for j := i; j >= 0 && j > i-8; j-- {
		if as[j].Start <= start && end <= as[j].End {
			return &as[j]
		}
	}
	return nil
}
