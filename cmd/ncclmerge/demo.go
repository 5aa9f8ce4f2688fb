package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/ncclprof/ncclprof/internal/merge"
	"github.com/ncclprof/ncclprof/internal/ptrace"
	"github.com/ncclprof/ncclprof/internal/synth"
	"github.com/spf13/cobra"
)

func demoCmd() *cobra.Command {
	var (
		ranks, iters   int
		dir, host, lib string
		scenario       string
	)
	c := &cobra.Command{
		Use:   "demo",
		Short: "Run a simulated multi-rank job through the real plugin and merge it (no GPU, no network)",
		Long: `Run a simulated job: one C test-host process per rank loads the real plugin library the way
NCCL does and replays NCCL's calls (build both with make). Each rank's plugin writes its NCCL
trace; ncclmerge then writes a matching torch.profiler-format trace for each rank, synthesized
from the plugin trace and labelled SIMULATED, merges all ranks into one timeline aligned on
collective ends, checks it, and prints what was linked and where the output is.`,
		Example: "  ncclmerge demo\n  ncclmerge demo --ranks 8 --scenario mixed --dir /tmp/demo",
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runDemo(dir, host, lib, scenario, ranks, iters)
		},
	}
	f := c.Flags()
	f.IntVar(&ranks, "ranks", 4, "number of simulated ranks (one test-host process each)")
	f.IntVar(&iters, "iters", 20, "operations per rank")
	f.StringVar(&scenario, "scenario", "allreduce", "test-host scenario: allreduce, p2p, alltoall or mixed")
	f.StringVar(&dir, "dir", "ncclmerge-demo", "output directory")
	f.StringVar(&host, "testhost", "build/ncclprof-testhost", "the C test host")
	f.StringVar(&lib, "lib", "build/libnccl-profiler-ncclprof.so", "the plugin library")
	return c
}

func runDemo(dir, host, lib, scenario string, ranks, iters int) error {
	for _, p := range []string{host, lib} {
		if _, err := os.Stat(p); err != nil {
			return fmt.Errorf("%s is missing: build the plugin and the test host with `make` in the repository root (or pass --testhost/--lib)", p)
		}
	}
	if ranks < 1 || ranks > 64 {
		return fmt.Errorf("--ranks %d: between 1 and 64", ranks)
	}
	ncclDir, kinDir := filepath.Join(dir, "nccl"), filepath.Join(dir, "kineto")
	for _, d := range []string{ncclDir, kinDir} {
		os.RemoveAll(d)
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	absLib, _ := filepath.Abs(lib)
	fmt.Printf("running %d simulated ranks (%s, %d operations each) through %s …\n", ranks, scenario, iters, lib)
	err := runRanks(ranks, func(r int) *exec.Cmd {
		cmd := exec.Command(host, "--lib", absLib, "--rank", strconv.Itoa(r), "--nranks", strconv.Itoa(ranks),
			"--iters", strconv.Itoa(iters), "--kernel", "--seed", "7", scenario)
		cmd.Env = append(os.Environ(), "NCCLPROF_TRACE=1", "NCCLPROF_SIMULATED=1", "NCCLPROF_EVENT_MASK=default,kernelch",
			"NCCLPROF_TRACE_DIR="+ncclDir, "NCCLPROF_OUTPUT_DIR="+ncclDir)
		return cmd
	})
	if err != nil {
		return err
	}
	traces, _ := filepath.Glob(filepath.Join(ncclDir, "*.trace.json"))
	if len(traces) == 0 {
		return fmt.Errorf("the plugin wrote no trace into %s: this plugin build has no trace writer (NCCLPROF_TRACE=1)", ncclDir)
	}
	var kinPaths []string
	for _, tp := range traces {
		t, err := ptrace.Read(tp)
		if err != nil {
			return err
		}
		rank := pluginRankOf(t)
		data, n := synth.KinetoFromPlugin(t, synth.KinetoOptions{Rank: rank, WorldSize: ranks, Device: rank % 8})
		kp := filepath.Join(kinDir, fmt.Sprintf("%s_%d.simulated.pt.trace.json", t.Host, t.Pid))
		if err := os.WriteFile(kp, data, 0o644); err != nil {
			return err
		}
		fmt.Printf("rank %d: plugin trace %s (%d events); simulated Kineto trace %s (%d NCCL kernels)\n",
			rank, tp, len(t.Events), kp, n)
		kinPaths = append(kinPaths, kp)
	}
	out := filepath.Join(dir, "timeline.json.gz")
	sum, err := merge.Run(kinPaths, traces, out, merge.Options{Timeline: true, Log: os.Stderr})
	if err != nil {
		return err
	}
	sum.WriteText(os.Stdout)
	for _, r := range sum.Ranks {
		if r.Kineto != "" && r.Linked[merge.RuleLaunch]+r.Linked[merge.RuleOrder] == 0 && r.NCCLKernels > 0 {
			return fmt.Errorf("rank %d: no kernel was linked", r.Rank)
		}
	}
	fmt.Printf("\nOpen %s in https://ui.perfetto.dev (the inputs are SIMULATED: the C test host stands in for NCCL and the Kineto traces are synthesized).\n", out)
	return nil
}

func pluginRankOf(t *ptrace.Trace) int {
	best, n := 0, 0
	for _, c := range t.Comms {
		if c.NRanks > n {
			best, n = c.Rank, c.NRanks
		}
	}
	return best
}

// runRanks runs one test-host process per rank at once (a job's ranks run together) and waits
// for all of them, even after one failed; it returns the first failure with what it printed.
func runRanks(n int, command func(rank int) *exec.Cmd) error {
	procs := make([]*exec.Cmd, n)
	stderrs := make([]strings.Builder, n)
	for r := 0; r < n; r++ {
		cmd := command(r)
		cmd.Stderr = &stderrs[r]
		if err := cmd.Start(); err != nil {
			for _, p := range procs[:r] { // do not leave the ranks already started running
				p.Process.Kill()
				p.Wait()
			}
			return err
		}
		procs[r] = cmd
	}
	var failed error
	for r, p := range procs {
		if err := p.Wait(); err != nil && failed == nil {
			failed = fmt.Errorf("test host rank %d failed: %v\n%s", r, err, stderrs[r].String())
		}
	}
	return failed
}
