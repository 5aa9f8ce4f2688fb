package merge

// blockLen is the number of records in a block of a blocks list.
const blockLen = 8192

// blocks is an append-only list kept in fixed-size blocks: a list of a record per event
// (millions) grows without a slice's doubling, which copies it and holds up to twice its size.
type blocks[T any] struct {
	b [][]T
	n int
}

func (l *blocks[T]) add(v T) {
	if len(l.b) == 0 || len(l.b[len(l.b)-1]) == blockLen {
		l.b = append(l.b, make([]T, 0, blockLen))
	}
	last := &l.b[len(l.b)-1]
	*last = append(*last, v)
	l.n++
}

func (l *blocks[T]) len() int { return l.n }

func (l *blocks[T]) at(i int) T { return l.b[i/blockLen][i%blockLen] }

// ptr points at record i: a block never grows past blockLen, so the pointer stays valid.
func (l *blocks[T]) ptr(i int) *T { return &l.b[i/blockLen][i%blockLen] }
