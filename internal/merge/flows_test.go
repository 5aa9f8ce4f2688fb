package merge

import (
	"math/rand"
	"slices"
	"testing"
)

// The flow table finds exactly the starts a map of every flow's ends finds, however the ids
// are spread: consecutive (pages), sparse (pages stop part-way, the rest in the map), of
// several kinds, ends before starts, ids repeated.
func TestFlowTableFindsDanglingStarts(t *testing.T) {
	rnd := rand.New(rand.NewSource(7))
	shapes := map[string]func(i int) flowKey{
		"consecutive": func(i int) flowKey { return flowKey{id: uint64(600000 + i/2)} },
		"sparse":      func(i int) flowKey { return flowKey{id: rnd.Uint64() >> uint(rnd.Intn(64))} },
		"dense then sparse": func(i int) flowKey {
			if i < 200000 {
				return flowKey{id: uint64(i / 3)}
			}
			return flowKey{id: uint64(i) << 20}
		},
		"kinds":    func(i int) flowKey { return flowKey{id: uint64(i % 5000), kind: uint32(i % 3)} },
		"repeated": func(i int) flowKey { return flowKey{id: uint64(rnd.Intn(300))} },
	}
	for name, key := range shapes {
		var ft flowTable
		ends := map[flowKey]int{}
		type start struct {
			off int64
			key flowKey
		}
		var starts []start
		for i := 0; i < 400000; i++ {
			k := key(i)
			isStart := rnd.Intn(5) < 2
			if isStart {
				starts = append(starts, start{int64(i), k})
			} else {
				ends[k]++
			}
			ft.add(k, isStart, int64(i))
		}
		var want []int64
		for _, s := range starts {
			if ends[s.key] == 0 {
				want = append(want, s.off)
			}
		}
		sparse := name == "sparse" || name == "dense then sparse"
		if ft.noPages != sparse || len(ft.pages) == 0 {
			t.Errorf("%s: pages stopped %v, %d pages", name, ft.noPages, len(ft.pages))
		}
		ft.finish()
		if !slices.Equal(ft.dangling, want) {
			t.Errorf("%s: %d dangling starts, want %d", name, len(ft.dangling), len(want))
		}
		if name == "dense then sparse" && (len(want) == 0 || len(want) == len(starts)) {
			t.Errorf("%s: the test plants no mix (%d of %d starts dangle)", name, len(want), len(starts))
		}
	}
}
