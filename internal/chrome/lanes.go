package chrome

// Lanes places slices of one thread on tracks where they nest, as Perfetto's importer requires:
// on a track, two slices are either disjoint or one contains the other. NCCL's intervals on one
// thread do not always nest (a proxy thread has many ProxyOps and steps in flight at once), so
// a slice that would partially overlap a recent slice of lane 0 (the thread's own track) goes to
// lane 1, and so on. Slices may arrive in any order; each lane remembers the laneMemory slices
// that end last.
type Lanes struct {
	lanes [][]span
	ends  []int64 // per lane, the latest end recorded: a slice starting after it fits at once
	// forgot is, per lane, the latest end among the slices it no longer remembers: a slice that
	// starts before it might overlap one of them, so it goes to another lane. Placement is
	// therefore exact, whatever the order of arrival, with bounded memory.
	forgot []int64
	// Overflow counts slices placed despite a conflict, because every lane was taken.
	Overflow uint64
}

type span struct{ s, e int64 }

const (
	laneMemory = 256 // recent slices a lane checks against
	maxLanes   = 64
)

func conflicts(a, b span) bool {
	if a.e <= b.s || b.e <= a.s { // disjoint (touching is fine)
		return false
	}
	nested := (a.s >= b.s && a.e <= b.e) || (b.s >= a.s && b.e <= a.e)
	return !nested
}

// Place returns the lane for a slice [start, end] (end ≥ start) and records it there.
func (l *Lanes) Place(start, end int64) int {
	sp := span{start, end}
	for i := range l.lanes {
		if l.fits(i, sp) {
			l.add(i, sp)
			return i
		}
	}
	if len(l.lanes) < maxLanes {
		l.grow()
		i := len(l.lanes) - 1
		l.add(i, sp)
		return i
	}
	l.Overflow++
	last := len(l.lanes) - 1
	l.add(last, sp)
	return last
}

// Add records a slice on a given lane without choosing (children placed with their parent).
func (l *Lanes) Add(lane int, start, end int64) {
	for len(l.lanes) <= lane {
		l.grow()
	}
	l.add(lane, span{start, end})
}

func (l *Lanes) grow() {
	l.lanes = append(l.lanes, nil)
	l.ends = append(l.ends, 0)
	l.forgot = append(l.forgot, 0)
}

func (l *Lanes) fits(i int, sp span) bool {
	if sp.s >= l.ends[i] {
		return true
	}
	if sp.s < l.forgot[i] {
		return false
	}
	for _, o := range l.lanes[i] {
		if conflicts(sp, o) {
			return false
		}
	}
	return true
}

// add records sp on lane i. A full lane forgets the slice that ended first, which keeps its
// forgot mark as early as possible: most slices arrive roughly in time order, so the ones that
// ended first are the least likely to matter again.
func (l *Lanes) add(i int, sp span) {
	ln := l.lanes[i]
	l.ends[i] = max(l.ends[i], sp.e)
	if len(ln) < laneMemory {
		l.lanes[i] = append(ln, sp)
		return
	}
	first := 0
	for j := range ln {
		if ln[j].e < ln[first].e {
			first = j
		}
	}
	l.forgot[i] = max(l.forgot[i], ln[first].e)
	ln[first] = sp
}
