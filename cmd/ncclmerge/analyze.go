package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"

	"github.com/ncclprof/ncclprof/internal/commops"
	"github.com/ncclprof/ncclprof/internal/merge"
	"github.com/spf13/cobra"
)

// The analysis commands (stats, skew, pprof, report) all read NCCL operations from the same kinds
// of input: plugin traces, merged ranks, merged timelines.

const traceArgsHelp = `TRACE is a file, a quoted glob or a directory: the plugin's *.trace.json, ncclmerge merge's
output of one rank (where NCCL kernels carry their sizes and GPU times, which are then used), or
a --timeline of all ranks. .json and .json.gz are recognized by content.`

// output is the file a command writes (-o), checked against its inputs before they are read;
// example is a file name to suggest when -o is a directory.
type output struct{ path, example string }

// readOps expands the arguments and reads their operations, with progress on stderr unless quiet.
func readOps(cmd *cobra.Command, args []string, quiet, legs bool, out ...output) (*commops.Set, error) {
	return readOpsWith(cmd, args, quiet, commops.Options{Legs: legs}, out...)
}

// readOpsWith is readOps with commops' options (Log is set here).
func readOpsWith(cmd *cobra.Command, args []string, quiet bool, opt commops.Options, out ...output) (*commops.Set, error) {
	if len(args) == 0 {
		return nil, fmt.Errorf("give the traces to read: ncclmerge %s TRACE... (files, quoted globs or directories; see --help)", cmd.Name())
	}
	paths, err := expandTraces(args)
	if err != nil {
		return nil, err
	}
	for _, o := range out {
		if err := checkOutput("-o", o.path, o.example, paths); err != nil {
			return nil, err
		}
	}
	var log io.Writer
	if !quiet {
		log = os.Stderr
	}
	debug.SetGCPercent(gcPercent(paths))
	opt.Log = log
	set, err := commops.Read(paths, opt)
	if err != nil {
		return nil, err
	}
	if len(set.Ops) == 0 {
		return nil, noOpsError(cmd.Name(), len(paths), set.Others)
	}
	return set, nil
}

// noOpsError says why traces hold no NCCL operation, in words that fit the run they come from:
// a hint to trace NCCL helps only where NCCL ran.
func noOpsError(command string, files int, o commops.Others) error {
	switch {
	case o.Gloo > 0 && o.NCCLKernels == 0:
		return fmt.Errorf("%s has nothing to analyse: the %d trace(s) come from a run without NCCL "+
			"(%d gloo collectives, torch.distributed's CPU backend) and ncclprof sees NCCL only. "+
			"Open the torch.profiler traces in https://ui.perfetto.dev, or put all ranks on one timeline: "+
			"ncclmerge merge --kineto 'DIR/rank*.pt.trace.json.gz' --timeline -o job.json.gz (no --nccl). "+
			"stats, skew, pprof and report need a run with NCCL (GPUs); ncclmerge demo shows them on a "+
			"simulated job", command, files, o.Gloo)
	case o.NCCLKernels > 0:
		return fmt.Errorf("no NCCL operations in %d trace(s): they hold %d NCCL kernels but none of the "+
			"plugin's events. Pass the plugin's traces (ncclprof-*.trace.json, written by ncclprof.profile "+
			"or NCCLPROF_TRACE=1) or ncclmerge merge outputs of them", files, o.NCCLKernels)
	}
	return fmt.Errorf("no NCCL operations in %d trace(s): pass the plugin's traces (ncclprof-*.trace.json, "+
		"written by ncclprof.profile or NCCLPROF_TRACE=1) or ncclmerge merge outputs, not torch.profiler "+
		"traces alone", files)
}

// expandTraces expands the arguments like merge's inputs, except that a directory gives its plugin
// traces and merged outputs (*.trace.json, *.merged.json, gzipped or not) when it has any, so that
// the summaries and other JSON the plugin writes beside them are passed over.
func expandTraces(args []string) ([]string, error) {
	var out []string
	for _, a := range args {
		if st, err := os.Stat(a); err == nil && st.IsDir() {
			var found []string
			for _, pat := range []string{"*.trace.json", "*.trace.json.gz", "*.merged.json", "*.merged.json.gz"} {
				m, _ := filepath.Glob(filepath.Join(a, pat))
				found = append(found, m...)
			}
			if len(found) > 0 {
				out = append(out, found...)
				continue
			}
		}
		m, err := merge.Expand([]string{a})
		if err != nil {
			return nil, err
		}
		out = append(out, m...)
	}
	return uniqueFiles(out), nil
}

// gcPercent paces garbage collection for reading paths. A plain trace is read in one pass with
// its pages given back behind the reader (tracefile.ReadPass), outside the heap: what the heap
// holds is what is kept of the operations, and collecting it at 50 % growth rather than 20 %
// costs a little memory for a fifth less CPU (why over 16 ranks × 2,000 merged collectives:
// 2.0 CPU s and 85 MB at 50, 2.5 s and 70 MB at 20, 1.8 s and 97 MB at 100). A gzip trace is
// inflated into the heap, one per CPU at a time: collected at 20 %, so the peak stays near the
// largest file's size.
func gcPercent(paths []string) int {
	for _, p := range paths {
		if strings.HasSuffix(p, ".gz") {
			return 20
		}
	}
	return 50
}
