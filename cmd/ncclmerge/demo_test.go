package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/ncclprof/ncclprof/internal/tracecheck"
	"github.com/ncclprof/ncclprof/internal/traceevent"
	"github.com/ncclprof/ncclprof/internal/tracefile"
	"github.com/tidwall/gjson"
)

// The demo runs the real plugin in the C test host (built by make) for 3 ranks, and every
// simulated kernel is linked by the launch rule.
func TestDemo(t *testing.T) {
	host, lib := "../../build/ncclprof-testhost", "../../build/libnccl-profiler-ncclprof.so"
	for _, p := range []string{host, lib} {
		if _, err := os.Stat(p); err != nil {
			t.Skipf("%s is not built (run make first): %v", p, err)
		}
	}
	dir := t.TempDir()
	if err := runDemo(dir, host, lib, "allreduce", 3, 6); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "timeline.json.gz")
	rep, err := tracecheck.File(out)
	if err != nil || !rep.OK() || rep.Total(tracecheck.Warning) != 0 {
		t.Fatalf("check: %v %+v", err, rep.Findings)
	}
	data, _ := tracefile.ReadFile(out)
	doc, err := traceevent.Read(out, data, traceevent.Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ranks := gjson.Get(doc.Member("ncclmerge"), "ranks")
	if n := len(ranks.Array()); n != 3 {
		t.Fatalf("%d ranks in the summary", n)
	}
	ranks.ForEach(func(_, r gjson.Result) bool {
		if r.Get("nccl_kernels").Int() != 6 || r.Get("linked.launch").Int() != 6 || !r.Get("simulated").Bool() {
			t.Errorf("rank summary %s", r.Raw)
		}
		return true
	})
}
