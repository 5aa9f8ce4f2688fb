package hosttest

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

var updateCalls = flag.Bool("update-calls", false, "rewrite testdata/nccl/*.calls (then check each by hand against NCCL's sources)")

// One blocking AllReduce of 128 KiB on one channel of two ranks (one network transfer each way),
// as each release calls the plugin, compared call for call with a golden checked by hand against
// NCCL's sources (docs/nccl-call-sites.md): descriptors' fields, parents, states and arguments.
// Handles and contexts are named by type and order of start (Coll1, ProxyOp2, …), threads by
// order of first call (T1 the user thread, T2 the proxy thread), pids replaced by "self".
func TestNCCLReleaseGoldenCalls(t *testing.T) {
	for _, rel := range ncclReleases {
		t.Run(rel.name, func(t *testing.T) {
			log := filepath.Join(t.TempDir(), "calls.log")
			Start(t, Options{Args: []string{"--nccl", rel.name, "--nranks", "2", "--channels", "1",
				"--iters", "1", "--fast", "--seed", "1", "allreduce"},
				Env: []string{"NCCLPROF_HOST_CALLLOG=" + log}})
			got := normalizeCalls(readCallLog(t, log))
			golden := filepath.Join("testdata", "nccl", rel.name+".calls")
			if *updateCalls {
				if err := os.MkdirAll(filepath.Dir(golden), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (make it with -update-calls, then check it by hand)", err)
			}
			if got != string(want) {
				t.Errorf("NCCL %s calls differ from %s:\n%s", rel.name, golden, lineDiff(string(want), got))
			}
		})
	}
}

// normalizeCalls writes the log one thread after the other (the threads' interleaving is not
// NCCL's to fix) with stable names for handles, contexts, threads and the pid.
func normalizeCalls(log []callLine) string {
	names := map[string]string{"0": "0"}
	perType := map[string]int{}
	threads := map[string]string{}
	byThread := map[string][]string{}
	typeName := map[string]string{"1": "Group", "2": "Coll", "4": "P2p", "8": "ProxyOp", "16": "ProxyStep",
		"32": "ProxyCtrl", "64": "KernelCh", "128": "NetPlugin", "256": "GroupApi", "512": "CollApi",
		"1024": "P2pApi", "2048": "KernelLaunch"}
	name := func(ref, kind string) string {
		if n, ok := names[ref]; ok {
			return n
		}
		perType[kind]++
		names[ref] = fmt.Sprintf("%s%d", kind, perType[kind])
		return names[ref]
	}
	pid := ""
	for _, l := range log {
		if threads[l.tid] == "" {
			threads[l.tid] = fmt.Sprintf("T%d", len(threads)+1)
		}
		var b strings.Builder
		b.WriteString(l.kind)
		switch l.kind {
		case "init", "finalize":
			fmt.Fprintf(&b, " ctx=%s", name(l.ref, "Ctx"))
		case "start":
			fmt.Fprintf(&b, " ctx=%s h=%s", name(l.ref, "Ctx"), name(l.get("h"), typeName[l.get("type")]))
		default:
			fmt.Fprintf(&b, " h=%s", name(l.ref, "Unknown"))
		}
		for _, f := range l.fields {
			v := f.v
			switch f.k {
			case "h", "type":
				continue
			case "parent", "pgroup":
				v = name(v, "Unknown")
			case "pid":
				if pid == "" {
					pid = v
				}
				if v == pid {
					v = "self"
				}
			}
			fmt.Fprintf(&b, " %s=%s", f.k, v)
		}
		if l.kind == "start" {
			b.WriteString(" type=" + typeName[l.get("type")])
		}
		byThread[threads[l.tid]] = append(byThread[threads[l.tid]], b.String())
	}
	var ts []string
	for t := range byThread {
		ts = append(ts, t)
	}
	sort.Strings(ts)
	var out strings.Builder
	for _, t := range ts {
		for _, l := range byThread[t] {
			fmt.Fprintf(&out, "%s %s\n", t, l)
		}
	}
	return out.String()
}

// lineDiff shows the first lines where two texts part.
func lineDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	for i := 0; i < len(w) || i < len(g); i++ {
		var a, b string
		if i < len(w) {
			a = w[i]
		}
		if i < len(g) {
			b = g[i]
		}
		if a != b {
			return fmt.Sprintf("line %d:\n want %s\n got  %s", i+1, a, b)
		}
	}
	return "(equal)"
}
