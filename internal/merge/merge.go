// Package merge joins a rank's Kineto trace with its ncclprof plugin trace: it links every NCCL
// kernel to the NCCL operation that launched it (by the launch call, else by order), places
// GPU channel times on the kernel's timeline, and streams one trace for Perfetto that keeps
// everything from both inputs. Several ranks can go into one timeline.
package merge

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/debug"
	"sort"
	"strings"
	"time"

	"github.com/ncclprof/ncclprof/internal/kineto"
	"github.com/ncclprof/ncclprof/internal/ptrace"
	"github.com/ncclprof/ncclprof/internal/tracefile"
)

// Options control a merge.
type Options struct {
	// Timeline writes all ranks into one trace; AlignEnds then aligns hosts on collective ends.
	Timeline  bool
	AlignEnds bool
	// CPUOffset forces the plugin → Kineto clock offset (ns) instead of measuring it.
	CPUOffset *int64
	// LaunchSlack is how far (ns) a launch call may stick out of a KernelLaunch interval;
	// 0 means the plugin's declared clock error plus 1 µs.
	LaunchSlack int64
	// KinetoBase is the base (Unix ns) for Kineto traces with relative ts and no base.
	KinetoBase *int64
	// Pairs pairs files explicitly: Kineto path → plugin paths.
	Pairs map[string][]string
	// Force merges files whose metadata says they are different processes.
	Force bool
	// Log receives progress and warnings (nil: silent).
	Log io.Writer
}

func (o *Options) logf(format string, a ...any) {
	if o.Log != nil {
		fmt.Fprintf(o.Log, format+"\n", a...)
	}
}

// Expand turns command-line paths (files, globs, directories) into trace files, in order; a
// directory gives its .json and .json.gz files.
func Expand(args []string) ([]string, error) { return ExpandFor(args, nil) }

// PluginTrace picks, in a directory, the files the plugin names as its traces
// (ncclprof-<host>-<pid>-<seq>[.n].trace.json): not its summaries, nor merged outputs.
func PluginTrace(name string) bool {
	b := filepath.Base(name)
	return strings.HasPrefix(b, "ncclprof-") && (strings.HasSuffix(b, ".trace.json") || strings.HasSuffix(b, ".trace.json.gz"))
}

// KinetoTrace picks, in a directory, what can be a torch.profiler trace: not the plugin's
// files (ncclprof-*), nor merged outputs (*.merged.json[.gz]).
func KinetoTrace(name string) bool {
	b := filepath.Base(name)
	return !strings.HasPrefix(b, "ncclprof-") && !strings.Contains(b, ".merged.json")
}

// ExpandFor is Expand where a directory gives only the files pick accepts (all if nil). Files
// and globs named on the command line are taken as given.
func ExpandFor(args []string, pick func(name string) bool) ([]string, error) {
	var out []string
	seen := map[string]bool{}
	add := func(p string) {
		if !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	for _, a := range args {
		if st, err := os.Stat(a); err == nil {
			if !st.IsDir() {
				add(a)
				continue
			}
			var found []string
			for _, pat := range []string{"*.json", "*.json.gz"} {
				m, _ := filepath.Glob(filepath.Join(a, pat))
				for _, f := range m {
					if pick == nil || pick(f) {
						found = append(found, f)
					}
				}
			}
			if len(found) == 0 {
				return nil, fmt.Errorf("%s: no traces of this kind (.json or .json.gz) in this directory", a)
			}
			sort.Strings(found)
			for _, f := range found {
				add(f)
			}
			continue
		}
		m, err := filepath.Glob(a)
		if err != nil {
			return nil, fmt.Errorf("%s: bad pattern: %v", a, err)
		}
		if len(m) == 0 {
			return nil, fmt.Errorf("%s: no such file, and no file matches it as a pattern", a)
		}
		sort.Strings(m)
		for _, f := range m {
			add(f)
		}
	}
	return out, nil
}

// Run merges the given traces into out: a .json/.json.gz file (one rank, or all ranks with
// Timeline), or a directory that receives one file per rank.
func Run(kinetoPaths, ncclPaths []string, out string, opt Options) (*Summary, error) {
	if len(kinetoPaths) == 0 {
		return nil, fmt.Errorf("no Kineto trace given (--kineto)")
	}
	toDir := isDirTarget(out)
	if !toDir && !opt.Timeline && len(kinetoPaths) > 1 {
		return nil, fmt.Errorf("%d Kineto traces but -o %s is one file: pass -o DIR for one merged file per rank, or --timeline for one trace of all ranks", len(kinetoPaths), out)
	}
	if opt.Timeline && len(kinetoPaths) > maxTimelineRanks {
		return nil, fmt.Errorf("--timeline takes at most %d ranks", maxTimelineRanks)
	}
	first := readAhead(kinetoPaths[0])
	plugins, lean, err := readPlugins(ncclPaths, opt)
	if err != nil {
		return nil, err
	}
	releaseMemory()
	p := newPairer(plugins, kinetoPaths, opt)
	p.index = indexPlugins(plugins, lean)
	sum := &Summary{}
	var ranks []*rankState
	for i, kp := range kinetoPaths {
		var data *fileAhead
		if i == 0 {
			data = first
		}
		r, err := loadRank(kp, data, p, opt)
		if err != nil {
			return nil, err
		}
		releaseMemory() // what linking left, before writing allocates
		r.idx = i
		if !opt.Timeline {
			target := out
			if toDir {
				target = filepath.Join(out, outName(kp))
			}
			rs, err := writeRanks(target, []*rankState{r}, false, nil, opt)
			if err != nil {
				return nil, err
			}
			sum.Ranks = append(sum.Ranks, rs.Ranks...)
			if toDir {
				sum.Output = out
			} else {
				sum.Output = target
			}
			continue
		}
		ranks = append(ranks, r)
	}
	if err := p.leftovers(); err != nil {
		return nil, err
	}
	if opt.Timeline {
		var align *Alignment
		if opt.AlignEnds {
			align = alignHosts(ranks)
		}
		target := out
		if toDir {
			target = filepath.Join(out, "timeline.json.gz")
		}
		rs, err := writeRanks(target, ranks, true, align, opt)
		if err != nil {
			return nil, err
		}
		return rs, nil
	}
	return sum, nil
}

// Outputs lists the files Run writes for these Kineto traces and -o: out itself, or in a
// directory one file per rank or the timeline. Callers check them against the inputs first.
func Outputs(kinetoPaths []string, out string, timeline bool) []string {
	switch {
	case !isDirTarget(out):
		return []string{out}
	case timeline:
		return []string{filepath.Join(out, "timeline.json.gz")}
	}
	paths := make([]string, len(kinetoPaths))
	for i, kp := range kinetoPaths {
		paths[i] = filepath.Join(out, outName(kp))
	}
	return paths
}

func isDirTarget(out string) bool {
	if strings.HasSuffix(out, "/") {
		return true
	}
	st, err := os.Stat(out)
	return err == nil && st.IsDir()
}

// outName is the merged file's name for a Kineto trace: its name with .merged before .json.
func outName(kineto string) string {
	base := filepath.Base(kineto)
	gz := strings.HasSuffix(base, ".gz")
	base = strings.TrimSuffix(strings.TrimSuffix(base, ".gz"), ".json")
	name := base + ".merged.json"
	if gz {
		name += ".gz"
	}
	return name
}

func readPlugins(paths []string, opt Options) ([]*ptrace.Trace, map[*ptrace.Trace]*leanPlugin, error) {
	var out []*ptrace.Trace
	lean := map[*ptrace.Trace]*leanPlugin{}
	for _, p := range paths {
		t, lp, err := readLean(p)
		if err != nil {
			return nil, nil, err
		}
		if t.Truncated {
			opt.logf("note: %s ends early (the job died while writing it); read %d events up to byte %d", p, t.Doc.Events, t.TruncatedAt)
		}
		out = append(out, t)
		lean[t] = lp
	}
	return out, lean, nil
}

// pluginIndexes are the plugin traces' indexes, built on a goroutine of their own while the
// Kineto traces are read: they need nothing of them, and building them took a tenth of a merge
// of an NCCL-heavy trace on the goroutine that then reads Kineto's events.
type pluginIndexes struct {
	done    chan struct{}
	byTrace map[*ptrace.Trace]*pluginIndex
}

func indexPlugins(plugins []*ptrace.Trace, lean map[*ptrace.Trace]*leanPlugin) *pluginIndexes {
	x := &pluginIndexes{done: make(chan struct{}), byTrace: map[*ptrace.Trace]*pluginIndex{}}
	go func() {
		defer close(x.done)
		defer tracefile.GuardFaults()() // the plugin traces are mapped
		for _, t := range plugins {
			x.byTrace[t] = newPluginIndex(t, lean[t])
		}
	}()
	return x
}

// of returns the index of a plugin trace, once built.
func (x *pluginIndexes) of(t *ptrace.Trace) *pluginIndex {
	<-x.done
	return x.byTrace[t]
}

// fileAhead is a file read on a goroutine of its own: the first Kineto trace is read (and
// decompressed) while the plugin traces are parsed, on the core they leave idle part of the
// time. (Only the first: reading the next rank's ahead would hold two Kineto traces at once.)
type fileAhead struct {
	done chan struct{}
	data []byte
	err  error
}

func readAhead(path string) *fileAhead {
	f := &fileAhead{done: make(chan struct{})}
	go func() {
		defer close(f.done)
		// Mapped, not copied: this trace is held to the end of the merge (see MapFile).
		f.data, f.err = tracefile.MapFile(path)
	}()
	return f
}

// loadRank reads a Kineto trace (one pass; ahead, its content when read already), pairs it with
// its plugin traces and links them.
func loadRank(path string, ahead *fileAhead, p *pairer, opt Options) (*rankState, error) {
	defer debug.SetGCPercent(debug.SetGCPercent(linkGCPercent))
	x := newKinetoIndex()
	prog := newProgress(opt, path)
	kopt := kineto.Options{Base: opt.KinetoBase, Progress: prog.update, Decode: true}
	var kt *kineto.Trace
	var err error
	if ahead != nil {
		<-ahead.done
		if err = ahead.err; err == nil {
			kopt.RepairUTF8 = true // the buffer is ours
			kt, err = kineto.Parse(path, ahead.data, kopt, x.visit)
		}
	} else {
		kt, err = kineto.Read(path, kopt, x.visit)
	}
	prog.done()
	if err != nil {
		return nil, err
	}
	releaseMemory()
	x.finish(kt)
	x.danglingFlows()
	plugins, err := p.pluginsFor(kt)
	if err != nil {
		return nil, err
	}
	r := newRank(opt, kt, x, plugins, p.index)
	r.link()
	return r, nil
}

// linkGCPercent is the collector's GOGC while the indexes are finished and linked: that phase
// allocates about 0.7x the heap it starts with, nearly all garbage, on top of the mapped input
// (small-nccl at 128 MiB: 120 MB live grew to 230 MB before Go's default of 100 collected).
// Collecting at a quarter keeps the merge's peak near its input's size; the heap then holds
// indexes, not the input's text, so a cycle marks little.
const linkGCPercent = 25

// releaseMemory collects the garbage of a phase (parse chunks, grown slices) and gives its pages
// back to the system before the next phase allocates: the next input's buffer is one large
// block that cannot reuse freed small spans, so without this the peak counted both. A cycle
// costs little: the inputs' text, most of the heap, holds no pointers to mark.
func releaseMemory() { debug.FreeOSMemory() }

// writeRanks streams the merged trace of the given ranks to path.
func writeRanks(path string, ranks []*rankState, timeline bool, align *Alignment, opt Options) (*Summary, error) {
	w, err := tracefile.Create(path)
	if err != nil {
		return nil, err
	}
	sum := &Summary{Output: path, Alignment: align}
	if err := writeTrace(w, ranks, timeline, sum); err != nil {
		w.Abort()
		return nil, fmt.Errorf("writing %s: %w", path, err)
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	return sum, nil
}

// outputBase is the base time of the output: the (first) Kineto base where there is one, so
// that Kineto's events need no rewriting, else the start of the 3-month window Kineto itself
// would have used.
func outputBase(ranks []*rankState) int64 {
	const window = int64(7889238) * 1e9
	base, found := int64(0), false
	lo := int64(1<<63 - 1)
	for _, r := range ranks {
		if r.kt.HasBase && (!found || r.kt.Base < base) {
			base, found = r.kt.Base, true
		}
		lo = min(lo, r.kx.minTs)
	}
	if found {
		return base
	}
	if lo <= 0 || lo == 1<<63-1 {
		return 0
	}
	return lo / window * window
}

func writeTrace(w output, ranks []*rankState, timeline bool, sum *Summary) error {
	e := newEmitter(w, outputBase(ranks))
	e.writeString("{\n\"schemaVersion\": 1,\n")
	if !timeline {
		r := ranks[0]
		for _, m := range r.kt.Members {
			switch m.Key {
			case "schemaVersion", "baseTimeNanoseconds", "displayTimeUnit":
				continue
			}
			e.writeString("\"" + m.Key + "\": " + m.Raw + ",\n")
		}
		writePluginHeaders(e, r)
	}
	e.writeString(fmt.Sprintf("\"displayTimeUnit\": \"ms\",\n\"baseTimeNanoseconds\": %d,\n\"traceEvents\": [", e.base))
	var tl *timelineMap
	if timeline {
		tl = &timelineMap{}
	}
	ids := newIDSpace()
	for _, r := range ranks {
		n0 := e.events
		r.writePluginProcessMeta(e, tl)
		r.writeKineto(e, tl)
		r.writePlugin(e, tl, ids)
		added := r.writeAdded(e, tl, ids)
		rs := r.summary()
		rs.EventsOut = e.events - n0
		rs.Added = added
		sum.Ranks = append(sum.Ranks, rs)
		if e.err != nil {
			return e.err
		}
	}
	e.writeString("\n],\n")
	if timeline {
		e.writeString("\"ncclmergeRanks\": [")
		for i, r := range ranks {
			if i > 0 {
				e.writeString(",")
			}
			e.writeString("\n")
			writeRankMeta(e, r)
		}
		e.writeString("\n],\n")
	}
	// The output's own name is left out: it is where the reader found the file.
	embedded := *sum
	embedded.Output = ""
	js, err := json.Marshal(&embedded)
	if err != nil {
		return err
	}
	e.writeString("\"ncclmerge\": ")
	e.write(js)
	e.writeString("\n}\n")
	e.flush()
	return e.err
}

// writePluginHeaders keeps the plugin's header objects (ncclprof, ncclprofEnd): one object for
// one plugin file, an array for several.
func writePluginHeaders(e *emitter, r *rankState) {
	for _, key := range []string{"ncclprof", "ncclprofEnd"} {
		var vals []string
		for _, p := range r.px {
			if v := p.t.Member(key); v != "" {
				vals = append(vals, v)
			}
		}
		switch len(vals) {
		case 0:
		case 1:
			e.writeString("\"" + key + "\": " + vals[0] + ",\n")
		default:
			e.writeString("\"" + key + "\": [" + strings.Join(vals, ",") + "],\n")
		}
	}
}

// writeRankMeta keeps a rank's top-level metadata in a timeline, where the top level is shared.
func writeRankMeta(e *emitter, r *rankState) {
	e.writeString(fmt.Sprintf("{\"rank\": %d, \"kineto\": %q, \"metadata\": {", r.label, r.kt.Path))
	first := true
	for _, m := range r.kt.Members {
		if !first {
			e.writeString(", ")
		}
		first = false
		e.writeString("\"" + m.Key + "\": " + m.Raw)
	}
	e.writeString("}")
	for _, key := range []string{"ncclprof", "ncclprofEnd"} {
		for _, p := range r.px {
			if v := p.t.Member(key); v != "" {
				e.writeString(", \"" + key + "\": " + v)
				break
			}
		}
	}
	e.writeString("}")
}

// progress reports reading a large trace on the log, at most every two seconds.
type progress struct {
	opt   Options
	path  string
	start time.Time
	last  time.Time
	shown bool
}

func newProgress(opt Options, path string) *progress {
	return &progress{opt: opt, path: path, start: time.Now(), last: time.Now()}
}

func (p *progress) update(done, total int64) {
	if p.opt.Log == nil || time.Since(p.last) < 2*time.Second {
		return
	}
	p.last = time.Now()
	p.shown = true
	mb := float64(done) / 1e6
	fmt.Fprintf(p.opt.Log, "reading %s: %.0f of %.0f MB (%.0f%%), %.0f MB/s\n", p.path, mb, float64(total)/1e6,
		100*float64(done)/float64(max(total, 1)), mb/time.Since(p.start).Seconds())
}

func (p *progress) done() {
	if p.shown {
		fmt.Fprintf(p.opt.Log, "read %s in %.1f s\n", p.path, time.Since(p.start).Seconds())
	}
}
