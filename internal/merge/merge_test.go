package merge

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/ncclprof/ncclprof/internal/jsonscan"
	"github.com/ncclprof/ncclprof/internal/kineto"
	"github.com/ncclprof/ncclprof/internal/synth"
	"github.com/ncclprof/ncclprof/internal/testtraces"
	"github.com/ncclprof/ncclprof/internal/tracecheck"
	"github.com/ncclprof/ncclprof/internal/traceevent"
	"github.com/ncclprof/ncclprof/internal/tracefile"
	"github.com/tidwall/gjson"
)

func realTrace(t testing.TB, name string) string { return testtraces.Kineto(t, name) }

// Bounds the tests hold the recovered clock offsets to.
const (
	// The launch rule's CPU offset is the mode of launch-call vs KernelLaunch midpoints; the
	// synthesizer pads each call by 0.5–3 µs on each side, so the midpoints differ by < 1.25 µs.
	cpuOffsetBound = 1500
	// The GPU offset is the kernel start minus its first channel start; channels start
	// 0.2–0.8 µs after their kernel.
	gpuOffsetBound = 1000
)

// outKernel is an NCCL kernel as the merged output shows it.
type outKernel struct {
	corr uint64
	rule string
	ops  []string
}

func readOutput(t *testing.T, path string) (*traceevent.Doc, map[uint64]outKernel) {
	t.Helper()
	data, err := tracefile.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	ks := map[uint64]outKernel{}
	doc, err := traceevent.Read(path, data, traceevent.Options{}, func(e *traceevent.Event) error {
		if kineto.CatOf(e.Cat) != kineto.CatKernel || !kineto.IsNCCLKernel(e.Name) {
			return nil
		}
		args := gjson.Parse(e.Raw[e.ArgsSpan.Start:e.ArgsSpan.End])
		k := outKernel{corr: args.Get("correlation").Uint(), rule: args.Get("nccl.link_rule").Str}
		if op := args.Get("nccl.op"); op.Exists() {
			k.ops = append(k.ops, op.Str)
		}
		args.Get("nccl.ops").ForEach(func(_, v gjson.Result) bool {
			k.ops = append(k.ops, v.Get("op").Str)
			return true
		})
		ks[k.corr] = k
		return nil
	})
	if err != nil {
		t.Fatalf("the output is not a readable trace: %v", err)
	}
	return doc, ks
}

type scenario struct {
	name   string
	kineto string
	opt    synth.PluginOptions
	// variant, if set, derives the Kineto trace the scenario merges from the real one.
	variant func(t *testing.T, src, dir string) string
}

func runScenario(t *testing.T, sc scenario, out string) (*Summary, *synth.Truth, string) {
	t.Helper()
	kpath := realTrace(t, sc.kineto)
	dir := t.TempDir()
	if sc.variant != nil {
		kpath = sc.variant(t, kpath, dir)
	}
	data, truth, err := synth.PluginFromKineto(kpath, sc.opt)
	if err != nil {
		t.Fatal(err)
	}
	npath := filepath.Join(dir, "ncclprof-h-1-0.trace.json")
	if err := os.WriteFile(npath, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if out == "" {
		out = filepath.Join(dir, "merged.json")
	}
	sum, err := Run([]string{kpath}, []string{npath}, out, Options{})
	if err != nil {
		t.Fatal(err)
	}
	return sum, truth, npath
}

// Every link the synthesizer planted is recovered, by the rule that should find it, and the
// clock offsets come back within the stated bounds.
func TestLinksRecovered(t *testing.T) {
	cases := []scenario{
		{"relative ts, launch rule, dropped launches, a mismatch", "nccl_parser_config_nccl_data.json.gz",
			synth.PluginOptions{CPUOffsetNs: 150_000, GPUOffsetNs: 2_500_000_000, DropLaunchEvery: 5, Mismatch: 3, Seed: 1}, nil},
		{"absolute µs, kernels without launch calls, dropped operations", "negative_queue_length_values_check_rank0.json.gz",
			synth.PluginOptions{CPUOffsetNs: -40_000, GPUOffsetNs: -7_000_000, DropOpEvery: 13, DropLaunchEvery: 7, Seed: 2, ErrorBoundNs: 900}, nil},
		{"ABI < 5: no KernelLaunch at all, order rule only", "nccl_parser_config_nccl_data.json.gz",
			synth.PluginOptions{NoAPI: true, GPUOffsetNs: 123_456_789, Seed: 3}, nil},
		{"sampled trace, no offset", "trace_filter_sampled_rank-1.json.gz",
			synth.PluginOptions{GPUOffsetNs: 42_000, Seed: 4}, nil},
		// Kernels launched before the Kineto window next to kernels whose KernelLaunch the
		// plugin dropped: ordering the kernels by launch call where there is one and by GPU
		// start elsewhere crossed the sequences and swapped operations.
		{"launched before the window, next launches dropped", "negative_queue_length_values_check_rank0.json.gz",
			synth.PluginOptions{DropLaunchEvery: 3, Seed: 12}, nil},
		{"launched before the window, every other launch dropped", "negative_queue_length_values_check_rank0.json.gz",
			synth.PluginOptions{DropLaunchEvery: 2, Seed: 13}, nil},
		// PyTorch before 2023-10 recorded a collective's shape and dtype only on its nccl:*
		// record_function ("Input Dims", "Input type"): a count one too many is refused there.
		{"older record_function args, a count mismatch", "nccl_parser_config_nccl_data.json.gz",
			synth.PluginOptions{Mismatch: 4, DropLaunchEvery: 6, Seed: 14}, olderArgs},
		// A float reduction kernel given a half-precision operation: refused by the kernel's
		// own name, with no PyTorch dtype at all.
		{"wrong datatype on a Sum_float kernel", "nccl_parser_config_nccl_data.json.gz",
			synth.PluginOptions{WrongType: 2, Seed: 15}, stripCollectiveArgs},
		{"wrong datatype with older record_function args", "nccl_parser_config_nccl_data.json.gz",
			synth.PluginOptions{WrongType: 7, Seed: 16}, olderArgs},
	}
	for _, sc := range cases {
		t.Run(sc.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "merged.json.gz")
			sum, truth, _ := runScenario(t, sc, out)
			_, got := readOutput(t, out)
			rules := map[string]int{}
			for _, want := range truth.Kernels {
				g, ok := got[want.Corr]
				if !ok {
					t.Fatalf("kernel with correlation %d missing from the output", want.Corr)
				}
				rules[want.Rule]++
				if g.rule != want.Rule {
					t.Errorf("kernel %d: linked by %q, want %q", want.Corr, g.rule, want.Rule)
					continue
				}
				sort.Strings(g.ops)
				sort.Strings(want.Ops)
				if want.Rule != "" && strings.Join(g.ops, ",") != strings.Join(want.Ops, ",") {
					t.Errorf("kernel %d: linked to %v, want %v", want.Corr, g.ops, want.Ops)
				}
			}
			rs := sum.Ranks[0]
			if rs.Linked[RuleLaunch] != rules["launch"] || rs.Linked[RuleOrder] != rules["order"] {
				t.Errorf("summary counts %v, truth %v; unlinked: %v", rs.Linked, rules, rs.UnlinkedKernels)
			}
			if sc.opt.CPUOffsetNs != 0 {
				if d := rs.Clock.CPUOffsetNs - sc.opt.CPUOffsetNs; abs(d) > cpuOffsetBound || !rs.Clock.CPUOffsetApplied {
					t.Errorf("CPU offset %d (applied %v), want %d ± %d", rs.Clock.CPUOffsetNs, rs.Clock.CPUOffsetApplied, sc.opt.CPUOffsetNs, cpuOffsetBound)
				}
			}
			if d := rs.Clock.GPUOffsetNs - sc.opt.GPUOffsetNs; abs(d) > gpuOffsetBound || rs.Clock.GPUOffsetFrom != "kernels" {
				t.Errorf("GPU offset %d from %q, want %d ± %d", rs.Clock.GPUOffsetNs, rs.Clock.GPUOffsetFrom, sc.opt.GPUOffsetNs, gpuOffsetBound)
			}
			t.Logf("%d kernels: %v; CPU offset %d ns, GPU offset %d ns (%d samples)", len(truth.Kernels), rules,
				rs.Clock.CPUOffsetNs, rs.Clock.GPUOffsetNs, rs.Clock.GPUOffsetSamples)
		})
	}
}

// canon is an event in a form that survives a change of base: its JSON with ts replaced by
// Unix ns and the members ncclmerge adds removed.
func canon(t *testing.T, raw string, unix int64) string {
	var m map[string]any
	d := json.NewDecoder(strings.NewReader(raw))
	d.UseNumber()
	if err := d.Decode(&m); err != nil {
		t.Fatalf("%v: %s", err, raw)
	}
	if _, ok := m["ts"]; ok {
		m["ts"] = unix
	}
	if a, ok := m["args"].(map[string]any); ok {
		delete(a, "nccl")
		delete(a, "ncclmerge")
	}
	b, _ := json.Marshal(m)
	return string(b)
}

func kinetoEvents(t *testing.T, path string) map[string]int {
	out := map[string]int{}
	var kt *kineto.Trace
	var raws []struct {
		raw string
		ts  int64
		has bool
	}
	kt, err := kineto.Read(path, kineto.Options{}, func(e *kineto.Event) error {
		raws = append(raws, struct {
			raw string
			ts  int64
			has bool
		}{e.Raw, e.Ts, e.HasTs})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range raws {
		out[canon(t, r.raw, kt.Unix(r.ts))]++
	}
	return out
}

// Nothing from the inputs is lost: every Kineto event is in the output (bit for bit where the
// base is kept, with the same Unix time where it is not), except the flow starts without an
// end, which the summary counts; every plugin slice is there too, moved by the measured offset.
func TestNothingLost(t *testing.T) {
	for _, sc := range []scenario{
		{"bulk copy", "nccl_parser_config_nccl_data.json.gz", synth.PluginOptions{CPUOffsetNs: 80_000, Seed: 5}, nil},
		{"rebased", "negative_queue_length_values_check_rank0.json.gz", synth.PluginOptions{Seed: 6}, nil},
	} {
		t.Run(sc.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "m.json")
			sum, _, npath := runScenario(t, sc, out)
			in := kinetoEvents(t, realTrace(t, sc.kineto))
			outEv := kinetoEvents(t, out)
			missing := 0
			for ev, n := range in {
				if outEv[ev] < n {
					missing += n - outEv[ev]
					if !strings.Contains(ev, `"ph":"s"`) {
						t.Errorf("input event lost: %.200s", ev)
					}
				}
			}
			if missing != sum.Ranks[0].Dropped {
				t.Errorf("%d Kineto events missing, the summary says %d dropped", missing, sum.Ranks[0].Dropped)
			}
			// Plugin slices: every one, by handle, at its time plus the applied shift.
			pdata, _ := os.ReadFile(npath)
			shift := int64(0)
			if sum.Ranks[0].Clock.CPUOffsetApplied {
				shift = sum.Ranks[0].Clock.CPUOffsetNs
			}
			want := pluginSlices(t, pdata, shift)
			odata, _ := tracefile.ReadFile(out)
			got := pluginSlices(t, odata, 0)
			for id, ts := range want {
				if got[id] != ts {
					t.Errorf("plugin slice %s at %d in the output, want %d", id, got[id], ts)
				}
			}
			if sum.Ranks[0].EventsOut != sum.Ranks[0].EventsIn.Kineto-sum.Ranks[0].Dropped+sum.Ranks[0].EventsIn.NCCL+sum.Ranks[0].Added {
				t.Errorf("event accounting: %+v", sum.Ranks[0])
			}
		})
	}
}

// pluginSlices maps the handle of every plugin slice (args.id, nccl_* categories, not the
// ones ncclmerge places) to its Unix start.
func pluginSlices(t *testing.T, data []byte, shift int64) map[string]int64 {
	out := map[string]int64{}
	var base int64
	doc, err := traceevent.Read("x", data, traceevent.Options{}, func(e *traceevent.Event) error {
		if e.Ph == "X" && strings.HasPrefix(e.Cat, "nccl_") && !strings.Contains(e.Raw, `"placed_by"`) {
			out[gjson.Get(e.Raw, "args.id").Str] = e.Ts
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	base, _ = jsonscan.Int(doc.Member("baseTimeNanoseconds"))
	for k, v := range out {
		out[k] = v + base + shift
	}
	return out
}

// `merge` never adds a warning its inputs did not already have, and its output has no errors.
func TestNoNewWarnings(t *testing.T) {
	for _, sc := range []scenario{
		{"nccl_data", "nccl_parser_config_nccl_data.json.gz", synth.PluginOptions{CPUOffsetNs: 30_000, GPUOffsetNs: 9_000, DropLaunchEvery: 4, Seed: 7}, nil},
		{"negative_queue", "negative_queue_length_values_check_rank0.json.gz", synth.PluginOptions{GPUOffsetNs: -1_000_000, Seed: 8}, nil},
		{"sampled", "trace_filter_sampled_rank-0.json.gz", synth.PluginOptions{Seed: 9}, nil},
	} {
		t.Run(sc.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "m.json")
			_, _, npath := runScenario(t, sc, out)
			ro, err := tracecheck.File(out)
			if err != nil {
				t.Fatal(err)
			}
			rk, _ := tracecheck.File(realTrace(t, sc.kineto))
			rn, _ := tracecheck.File(npath)
			if !ro.OK() {
				var b bytes.Buffer
				ro.WriteText(&b)
				t.Fatalf("the output has errors:\n%s", b.String())
			}
			for _, code := range []string{tracecheck.CodeOverlap, tracecheck.CodeTidZero, tracecheck.CodeNegativeTs,
				tracecheck.CodeNegativeDur, tracecheck.CodeEndBeforeBegin, tracecheck.CodeFlowBackwards} {
				if o, in := ro.Count(code), rk.Count(code)+rn.Count(code); o > in {
					t.Errorf("%s: %d in the output, %d in the inputs", code, o, in)
				}
			}
		})
	}
}

// derivedRank writes a copy of a Kineto trace as another rank of the same job on another
// host: another pid, rank 1, and its clock `skew` ns ahead (the base moved, every ts kept).
func derivedRank(t *testing.T, src string, pid int64, skew int64, dir string) string {
	data, err := tracefile.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	s := string(data)
	s = strings.ReplaceAll(s, `"pid": 2910249`, fmt.Sprintf(`"pid": %d`, pid))
	s = strings.Replace(s, `"rank": 0`, `"rank": 1`, 1)
	s = strings.Replace(s, `"baseTimeNanoseconds": 1711964646000000000`, fmt.Sprintf(`"baseTimeNanoseconds": %d`, 1711964646000000000+skew), 1)
	p := filepath.Join(dir, "rank1.json.gz")
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	zw.Write([]byte(s))
	zw.Close()
	if err := os.WriteFile(p, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// Two ranks on two hosts whose clocks differ by 250 µs: one timeline, processes apart, flows
// renumbered, and the alignment on collective ends recovers the skew.
func TestTimelineAlignment(t *testing.T) {
	dir := t.TempDir()
	k0 := realTrace(t, "nccl_parser_config_nccl_data.json.gz")
	const skew = 250_000
	k1 := derivedRank(t, k0, 2910250, skew, dir)
	var npaths []string
	for i, k := range []string{k0, k1} {
		data, _, err := synth.PluginFromKineto(k, synth.PluginOptions{Seed: 11, Host: fmt.Sprintf("host%d", i)})
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, fmt.Sprintf("n%d.trace.json", i))
		os.WriteFile(p, data, 0o644)
		npaths = append(npaths, p)
	}
	out := filepath.Join(dir, "timeline.json")
	sum, err := Run([]string{k0, k1}, npaths, out, Options{Timeline: true, AlignEnds: true})
	if err != nil {
		t.Fatal(err)
	}
	a := sum.Alignment
	if a == nil || a.Collectives != 21 || a.HostShiftNs["host1"] != -skew || a.ResidualMedianNs != 0 || a.BeforeMedianNs != skew {
		t.Fatalf("alignment %+v", a)
	}
	for _, r := range sum.Ranks {
		if r.Linked[RuleLaunch] != 21 {
			t.Errorf("rank %d linked %v", r.Rank, r.Linked)
		}
	}
	rep, _ := tracecheck.File(out)
	if !rep.OK() || rep.Count(tracecheck.CodeOverlap) > 0 {
		var b bytes.Buffer
		rep.WriteText(&b)
		t.Fatalf("timeline check:\n%s", b.String())
	}
	// Process names say which rank they are; the two ranks' GPU 0 are different processes.
	data, _ := os.ReadFile(out)
	names := map[string]string{}
	traceevent.Read(out, data, traceevent.Options{}, func(e *traceevent.Event) error {
		if e.Ph == "M" && e.Name == "process_name" {
			names[e.Raw[e.PidSpan.Start:e.PidSpan.End]] = gjson.Get(e.Raw, "args.name").Str
		}
		return nil
	})
	if names["4194304"] != "rank 0 GPU 0" || names["8388608"] != "rank 1 GPU 0" ||
		names[fmt.Sprint(timelinePid(1, 2910250))] != "rank 1 python3.10 (pid 2910250)" {
		t.Errorf("process names: %v", names)
	}
}

// A trace of one rank presented as another's is refused with a message that says what to do.
func TestWrongRankRefused(t *testing.T) {
	data, _, err := synth.PluginFromKineto(realTrace(t, "trace_filter_sampled_rank-1.json.gz"), synth.PluginOptions{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	np := filepath.Join(dir, "rank1.trace.json")
	os.WriteFile(np, data, 0o644)
	_, err = Run([]string{realTrace(t, "trace_filter_sampled_rank-0.json.gz")}, []string{np}, filepath.Join(dir, "o.json"), Options{})
	if err == nil || !strings.Contains(err.Error(), "not the same process") || !strings.Contains(err.Error(), "pid 4037 ≠ 4045") ||
		!strings.Contains(err.Error(), "--force") {
		t.Fatalf("want a refusal naming the pids, got %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "o.json")); err == nil {
		t.Fatal("an output was written anyway")
	}
}

// Several ranks, matched by pid, one file per rank into a directory.
func TestPairingByMetadata(t *testing.T) {
	dir := t.TempDir()
	var ks, ns []string
	for i, name := range []string{"trace_filter_sampled_rank-0.json.gz", "trace_filter_sampled_rank-1.json.gz"} {
		k := realTrace(t, name)
		data, _, err := synth.PluginFromKineto(k, synth.PluginOptions{Seed: int64(i)})
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, fmt.Sprintf("ncclprof-h-%d.trace.json", i))
		os.WriteFile(p, data, 0o644)
		ks = append(ks, k)
		ns = append([]string{p}, ns...) // reversed: pairing must not go by order
	}
	outDir := filepath.Join(dir, "out") + "/"
	os.MkdirAll(outDir, 0o755)
	sum, err := Run(ks, ns, outDir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range sum.Ranks {
		if r.Rank != i || len(r.NCCL) != 1 || !strings.HasSuffix(r.NCCL[0], fmt.Sprintf("-%d.trace.json", i)) || r.Linked[RuleLaunch] != 10 {
			t.Errorf("rank %d: %+v", i, r)
		}
	}
	for _, name := range []string{"trace_filter_sampled_rank-0.merged.json.gz", "trace_filter_sampled_rank-1.merged.json.gz"} {
		if rep, err := tracecheck.File(filepath.Join(outDir, name)); err != nil || !rep.OK() {
			t.Errorf("%s: %v %+v", name, err, rep)
		}
	}
}

// NCCL's example profiler plugin: times since the plugin started, unquoted values, no thread
// ids, no KernelLaunch. The order rule finds the offset and links both kernels.
func TestExamplePluginByOrder(t *testing.T) {
	out := filepath.Join(t.TempDir(), "m.json")
	sum, err := Run([]string{"testdata/tiny_kineto.json"}, []string{"testdata/tiny_example_plugin.json"}, out, Options{})
	if err != nil {
		t.Fatal(err)
	}
	r := sum.Ranks[0]
	// The first COLL starts 3 µs after the plugin started and its kernel's launch call is at
	// 1010 µs after the base: the offset is base + 1007 µs.
	if r.Linked[RuleOrder] != 2 || !r.Unanchored || r.Clock.CPUOffsetNs != 1700000000000000000+1007000 || r.Clock.CPUOffsetSamples != 2 {
		t.Fatalf("%+v", r)
	}
	_, ks := readOutput(t, out)
	if ks[11].rule != RuleOrder || ks[12].rule != RuleOrder {
		t.Fatalf("kernels: %+v", ks)
	}
	if rep, _ := tracecheck.File(out); !rep.OK() {
		t.Fatalf("check: %+v", rep.Findings)
	}
}

// A plugin trace whose events are the first of the output (a Kineto trace with none): its
// events are written once, after the header, and the file is valid. (The writer once took the
// buffer it handed its events in for its own, losing the header.)
func TestPluginEventsFirstInOutput(t *testing.T) {
	dir := t.TempDir()
	kin := filepath.Join(dir, "empty_kineto.json")
	if err := os.WriteFile(kin, []byte(`{"schemaVersion":1,"traceEvents":[]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	plugin, err := os.ReadFile("testdata/tiny_example_plugin.json")
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "m.json")
	if _, err := Run([]string{kin}, []string{"testdata/tiny_example_plugin.json"}, out, Options{}); err != nil {
		t.Fatal(err)
	}
	rep, err := tracecheck.File(out)
	if err != nil || !rep.OK() {
		t.Fatalf("check: %v %+v", err, rep)
	}
	// Every event of the plugin's file but its {} sentinel.
	if want := strings.Count(string(plugin), `"ph"`); rep.Events != want {
		t.Fatalf("%d events in the output, want the plugin trace's %d", rep.Events, want)
	}
}

// stripCollectiveArgs writes a copy of a Kineto trace whose kernels carry no collective args
// ("Collective name" … "Process Group Ranks", the last members of a kernel's args), as traces
// before 2023-10 have them.
func stripCollectiveArgs(t *testing.T, src, dir string) string {
	return olderTrace(t, src, dir, false)
}

// olderArgs is stripCollectiveArgs with each kernel's element count and dtype moved onto the
// nccl:* record_function around its launch call, as "Input Dims" and "Input type".
func olderArgs(t *testing.T, src, dir string) string {
	return olderTrace(t, src, dir, true)
}

func olderTrace(t *testing.T, src, dir string, annotate bool) string {
	t.Helper()
	type span struct {
		at, end int64
		text    string
	}
	type ann struct {
		pid, tid, start, end int64
		argsAt               int64
	}
	var edits []span
	var anns []ann
	type call struct{ pid, tid, start, end int64 }
	launches := map[uint64]call{}
	type kern struct {
		corr  uint64
		comms kineto.CommsArgs
	}
	var kerns []kern
	_, err := kineto.Read(src, kineto.Options{}, func(e *kineto.Event) error {
		switch {
		case e.Cat == kineto.CatUserAnnotation && strings.HasPrefix(e.Name, "nccl:"):
			anns = append(anns, ann{e.Pid.Num, e.Tid.Num, e.Ts, e.Ts + e.Dur, e.Off + int64(e.ArgsSpan.Start) + 1})
		case e.Cat == kineto.CatRuntime && kineto.IsLaunch(e.Name):
			launches[e.Correlation()] = call{e.Pid.Num, e.Tid.Num, e.Ts, e.Ts + e.Dur}
		case e.Cat == kineto.CatKernel && kineto.IsNCCLKernel(e.Name):
			c := e.Comms()
			if i := strings.Index(e.Raw, `, "Collective name"`); i >= 0 {
				end := int64(e.ArgsSpan.End) - 1
				for e.Raw[end-1] == ' ' || e.Raw[end-1] == '\n' {
					end--
				}
				edits = append(edits, span{e.Off + int64(i), e.Off + end, ""})
				kerns = append(kerns, kern{e.Correlation(), c})
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if annotate {
		for _, k := range kerns {
			l, ok := launches[k.corr]
			if !ok || k.comms.InNelems < 0 {
				continue
			}
			for _, a := range anns {
				if a.pid == l.pid && a.tid == l.tid && a.start <= l.start && l.end <= a.end {
					dt := map[string]string{"Float": "float", "Half": "c10::Half", "BFloat16": "c10::BFloat16"}[k.comms.Dtype]
					edits = append(edits, span{a.argsAt, a.argsAt, fmt.Sprintf(`"Input Dims": [[%d]], "Input type": [%q], `, k.comms.InNelems, dt)})
				}
			}
		}
	}
	sort.Slice(edits, func(i, j int) bool { return edits[i].at > edits[j].at })
	data, err := tracefile.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range edits {
		data = append(data[:e.at], append([]byte(e.text), data[e.end:]...)...)
	}
	p := filepath.Join(dir, "older.json")
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	n := 0
	if _, err := kineto.Read(p, kineto.Options{}, func(e *kineto.Event) error {
		if e.Cat == kineto.CatKernel && e.Comms().Present {
			t.Errorf("collective args left on a kernel: %.300s", e.Raw)
		}
		if strings.Contains(e.Raw, `"Input Dims": [[`) && strings.HasPrefix(e.Name, "nccl:") {
			n++
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if annotate && n != len(kerns) {
		t.Fatalf("%d record_functions annotated for %d kernels", n, len(kerns))
	}
	return p
}
