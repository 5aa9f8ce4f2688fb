package merge

// flowTable counts the ends of a Kineto trace's v1 flows, to find the starts that never end
// (Perfetto draws nothing for them, and the output leaves them out). A trace has a flow per
// kernel launch; a map of them was a fifth of reading a Kineto trace, each access a cache
// miss. Their ids are CUPTI correlations, numbered in order, and a flow's two events lie close
// together in the file: counted in pages of consecutive ids, an access is an index into a page
// in cache. Ids too sparse for pages (a hand-made or hostile file), and flows of other kinds
// than the first, are counted in a map.
type flowTable struct {
	pages    map[uint64]*flowPage // by id >> flowPageBits, for kind 0
	last     *flowPage
	lastNum  uint64
	noPages  bool // no more pages: the ids are too sparse
	other    map[flowKey]uint32
	seen     int // flow events counted
	starts   blocks[flowStart]
	dangling []int64 // once finished: offsets of the flow starts with no end, in file order
}

const (
	flowPageBits = 12
	flowPageMask = 1<<flowPageBits - 1
)

// flowPage counts the ends of 4096 consecutive ids.
type flowPage [1 << flowPageBits]uint32

// flowStart is a flow start, to find afterwards the ones that never end.
type flowStart struct {
	off int64
	key flowKey
}

// add counts a flow event: a start at offset off, or an end ("t" and "f").
func (t *flowTable) add(k flowKey, start bool, off int64) {
	t.seen++
	p := t.pageOf(k)
	switch {
	case start:
		t.starts.add(flowStart{off, k})
	case p != nil:
		p[k.id&flowPageMask]++
	default:
		if t.other == nil {
			t.other = map[flowKey]uint32{}
		}
		t.other[k]++
	}
}

// pageOf returns the page that counts k, made if pages are still made, or nil where k is
// counted in the map. A key counted in the map never gets a page later: once pages stop
// being made, they stop for good.
func (t *flowTable) pageOf(k flowKey) *flowPage {
	if k.kind != 0 {
		return nil
	}
	n := k.id >> flowPageBits
	if t.last != nil && n == t.lastNum {
		return t.last
	}
	p := t.pages[n]
	if p == nil && !t.noPages {
		// Pages are made while they hold at least one flow event per 16 ids (a page is
		// 16 KiB), past the first 32.
		if len(t.pages) >= 32 && len(t.pages)<<flowPageBits > 16*t.seen {
			t.noPages = true
			return nil
		}
		if t.pages == nil {
			t.pages = map[uint64]*flowPage{}
		}
		p = new(flowPage)
		t.pages[n] = p
	}
	if p != nil {
		t.last, t.lastNum = p, n
	}
	return p
}

// ends returns how many ends key has.
func (t *flowTable) ends(k flowKey) uint32 {
	if k.kind == 0 {
		if p := t.pages[k.id>>flowPageBits]; p != nil {
			return p[k.id&flowPageMask]
		}
	}
	return t.other[k]
}

// finish lists the flow starts that have no end and lets go of the counts.
func (t *flowTable) finish() {
	for i := 0; i < t.starts.len(); i++ {
		if st := t.starts.at(i); t.ends(st.key) == 0 {
			t.dangling = append(t.dangling, st.off)
		}
	}
	*t = flowTable{dangling: t.dangling}
}
