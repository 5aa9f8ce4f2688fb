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
	// Max is the most lanes (0: 64). A proxy thread of real NCCL had 149 slices overlapping at
	// once in 20 iterations of ordinary patterns (ProxyOps queued behind their connections).
	Max int
}

type span struct{ s, e int64 }

const (
	laneMemory = 256 // recent slices a lane checks against
	maxLanes   = 64  // unless Lanes.Max says otherwise
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
	return l.PlaceGroup([][2]int64{{start, end}})
}

// PlaceGroup returns one lane where every slice of a group fits (a step and its states, which
// must share its track to nest in it) and records them all there. Placing the parent alone and
// adding its children blindly let a child partly overlap another slice of that lane: real NCCL's
// steps, eight in flight per ProxyOp, did (testdata/nccl).
func (l *Lanes) PlaceGroup(group [][2]int64) int {
	fitsAll := func(i int) bool {
		for _, g := range group {
			if !l.fits(i, span{g[0], g[1]}) {
				return false
			}
		}
		return true
	}
	lane := -1
	for i := range l.lanes {
		if fitsAll(i) {
			lane = i
			break
		}
	}
	limit := maxLanes
	if l.Max > 0 {
		limit = l.Max
	}
	if lane < 0 && len(l.lanes) < limit {
		l.grow()
		lane = len(l.lanes) - 1
	}
	if lane < 0 {
		l.Overflow++
		lane = len(l.lanes) - 1
	}
	for _, g := range group {
		l.add(lane, span{g[0], g[1]})
	}
	return lane
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
