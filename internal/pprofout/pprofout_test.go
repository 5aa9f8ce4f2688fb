package pprofout

import (
	"bytes"
	"strings"
	"testing"

	"github.com/google/pprof/profile"
	"github.com/ncclprof/ncclprof/internal/commops"
	"github.com/ncclprof/ncclprof/internal/commops/commopstest"
	"github.com/ncclprof/ncclprof/internal/synth"
)

// The profile's totals are the traces': time, bytes and count, after a write and a parse.
func TestTotalsEqualTheTraces(t *testing.T) {
	o := synth.DefaultJob(4, 60)
	o.Detail = true
	s, paths := commopstest.Job(t, o, commops.Options{Legs: true})
	var buf bytes.Buffer
	if err := Write(&buf, Build(s)); err != nil {
		t.Fatal(err)
	}
	p, err := profile.Parse(&buf)
	if err != nil {
		t.Fatal(err)
	}
	gotT, gotB, gotN := Totals(p)
	wantT, wantB, wantN := commopstest.CompletionTotals(t, paths)
	if gotT != wantT || gotB != wantB || gotN != wantN || wantN != 240 {
		t.Errorf("profile totals %d ns, %d B, %d ops; traces %d ns, %d B, %d ops", gotT, gotB, gotN, wantT, wantB, wantN)
	}
	if p.DefaultSampleType != "time" || len(p.SampleType) != 3 || p.SampleType[1].Unit != "bytes" {
		t.Errorf("sample types %v", p.SampleType)
	}
	// Stacks: rank → communicator → operation → channel and peer; labels algo and proto.
	var leaf *profile.Sample
	for _, sm := range p.Sample {
		if len(sm.Location) == 4 {
			leaf = sm
			break
		}
	}
	if leaf == nil {
		t.Fatal("no sample down to a channel")
	}
	var names []string
	for _, l := range leaf.Location {
		names = append(names, l.Line[0].Function.Name)
	}
	stack := strings.Join(names, " ← ")
	for _, want := range []string{"channel ", "→ peer ", "AllReduce 1-2MiB", "world [4 ranks]", "rank "} {
		if !strings.Contains(stack, want) {
			t.Errorf("stack %q lacks %q", stack, want)
		}
	}
	if leaf.Label["algo"][0] != "RING" || leaf.Label["proto"][0] != "SIMPLE" || !strings.HasPrefix(leaf.Label["step"][0], "step ") {
		t.Errorf("labels %v", leaf.Label)
	}
}

func TestShareKeepsTotals(t *testing.T) {
	for _, c := range [][2]int64{{10, 3}, {7, 7}, {0, 4}, {1_000_003, 6}} {
		var sum int64
		for i := 0; i < int(c[1]); i++ {
			sum += share(c[0], c[1], i)
		}
		if sum != c[0] {
			t.Errorf("%d split %d ways sums to %d", c[0], c[1], sum)
		}
	}
}
