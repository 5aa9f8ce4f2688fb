package hang_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/ncclprof/ncclprof/internal/hang"
	"github.com/ncclprof/ncclprof/internal/hang/hangtruth"
)

// Ranks that disagree about the collective they are in — another function, a quarter of the
// count, another datatype or root at the same point, or two communicators' collectives called in
// different orders — are named on the planted rank, with what differs, on 4 and 64 ranks, with
// only the ranks in flight dumping and with all of them. Before the mismatch verdict these read
// "rank 2 never started AllReduce" (function), nobody at all, exit 2 (count, datatype, root),
// and every rank of both communicators absent (order).
func TestMismatchNamesPlantedRank(t *testing.T) {
	var cases [][]string
	for _, n := range []int{4, 64} {
		culprit := fmt.Sprint(n/2 + 1)
		for _, what := range []string{"function", "count", "datatype", "root"} {
			cases = append(cases, []string{"--scenario", "mismatch", "--what", what, "--culprit", culprit, "--nranks", fmt.Sprint(n), "--channels", "2"})
		}
		cases = append(cases, []string{"--scenario", "order", "--culprit", culprit, "--nranks", fmt.Sprint(n), "--channels", "2"})
	}
	eachPlanted(t, cases, func(t *testing.T, res *hang.Result, truths []hangtruth.Truth) {
		checkMismatchText(t, res, truths[0].Planted[0])
	})
}

// checkMismatchText: the verdict's first line names the rank, what it called and what differs,
// and the JSON says what the others called.
func checkMismatchText(t *testing.T, res *hang.Result, p hangtruth.Planted) {
	t.Helper()
	if len(res.Suspects) == 0 || res.Suspects[0].Mismatch == nil {
		return // AssertPlanted said so
	}
	line := strings.SplitN(res.Verdict, "\n", 2)[0]
	m := res.Suspects[0].Mismatch
	want := []string{fmt.Sprintf("rank %d ", p.Rank), "differ"}
	switch p.Differs {
	case "function":
		want = append(want, "called AllGather seq 0", fmt.Sprintf("called AllReduce seq %d", p.Seq), "the function differs",
			fmt.Sprintf("the last operation they agree on is AllReduce seq %d", p.Seq-1))
		if m.Called.Func != "AllGather" || m.Others.Func != "AllReduce" || m.LastAgreed == nil || m.LastAgreed.Seq != p.Seq-1 {
			t.Errorf("mismatch %+v", m)
		}
	case "count":
		if m.Called.Count*4 != m.Others.Count {
			t.Errorf("called count %d, others %d: want a quarter", m.Called.Count, m.Others.Count)
		}
		want = append(want, "the count differs")
	case "datatype":
		want = append(want, "ncclFloat16", "the datatype differs")
	case "root":
		want = append(want, ", root 0)", fmt.Sprintf(", root %d)", len(res.Hangs[0].Ranks)-1), "the root differs")
	case "order":
		want = append(want, "in AllGather seq", "never started AllReduce seq", "a cycle across communicators")
		if m.Called.Comm == m.Others.Comm {
			t.Errorf("an order mismatch within one communicator: %+v", m)
		}
	}
	for _, w := range want {
		if !strings.Contains(line, w) {
			t.Errorf("verdict %q does not say %q", line, w)
		}
	}
}
