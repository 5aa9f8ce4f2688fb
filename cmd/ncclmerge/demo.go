package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/ncclprof/ncclprof/internal/commops"
	"github.com/ncclprof/ncclprof/internal/merge"
	"github.com/ncclprof/ncclprof/internal/ptrace"
	"github.com/ncclprof/ncclprof/internal/report"
	"github.com/ncclprof/ncclprof/internal/skew"
	"github.com/ncclprof/ncclprof/internal/stats"
	"github.com/ncclprof/ncclprof/internal/synth"
	"github.com/ncclprof/ncclprof/internal/why"
	"github.com/ncclprof/ncclprof/internal/words"
	"github.com/spf13/cobra"
)

// demoOptions are the demo's flags.
type demoOptions struct {
	dir, host, lib, scenario string
	ranks, iters, slowRank   int
	slowMs                   float64
}

func demoCmd() *cobra.Command {
	var o demoOptions
	c := &cobra.Command{
		Use:   "demo",
		Short: "Run a simulated multi-rank job through the real plugin and merge it (no GPU, no network)",
		Long: `Run a simulated job: one C test-host process per rank loads the real plugin library the way
NCCL does and replays NCCL's calls (build both with make). In the default scenario, job, the
ranks run AllReduces on one schedule and wait for each other as a real job's ranks do (each
collective ends on every rank after the last one arrived), and one rank (--slow-rank) arrives
--slow-ms late on every collective of the odd training steps, its launching thread in the data
loader (host). One more cause of lateness of each kind is planted, each --slow-ms long, on the
ranks after it: the next rank's GPU starts collective 10 late behind longer compute kernels
while its CPU calls on time (gpu_compute), the one after's GPU starts collective 2 late behind a
copy on another stream (dependency), and the one after's sends of collective 12 run slow
(network). ncclmerge why names each on its rank and step.

Each rank's plugin writes its NCCL trace; ncclmerge then writes a matching torch.profiler-format
trace for each rank, synthesized from the plugin trace and labelled SIMULATED, merges all ranks
into one timeline aligned on collective ends, checks it, prints what was linked and which rank
ncclmerge skew finds slow, and writes the HTML report (ncclmerge report) beside the timeline.

The other scenarios (allreduce, p2p, alltoall, mixed) replay other NCCL call patterns; their
ranks do not wait for each other, so their skew means nothing.`,
		Example: "  ncclmerge demo\n  ncclmerge demo --ranks 8 --slow-rank 5 --dir /tmp/demo\n  ncclmerge demo --scenario mixed",
		RunE:    func(cmd *cobra.Command, _ []string) error { return runDemo(o) },
	}
	f := c.Flags()
	f.IntVar(&o.ranks, "ranks", 4, "number of simulated ranks (one test-host process each)")
	f.IntVar(&o.iters, "iters", 20, "operations per rank (job: 5 per training step)")
	f.StringVar(&o.scenario, "scenario", "job", "test-host scenario: job, allreduce, p2p, alltoall or mixed")
	f.IntVar(&o.slowRank, "slow-rank", 1, "job: the rank that arrives late on the odd steps (-1: none)")
	f.Float64Var(&o.slowMs, "slow-ms", 3, "job: how late it arrives, in milliseconds")
	f.StringVar(&o.dir, "dir", "ncclmerge-demo", "output directory")
	f.StringVar(&o.host, "testhost", "build/ncclprof-testhost", "the C test host")
	f.StringVar(&o.lib, "lib", "build/libnccl-profiler-ncclprof.so", "the plugin library")
	return c
}

func (o demoOptions) check() error {
	for _, p := range []string{o.host, o.lib} {
		if _, err := os.Stat(p); err != nil {
			return fmt.Errorf("%s is missing: build the plugin and the test host with `make` in the repository root (or pass --testhost/--lib)", p)
		}
	}
	switch {
	case o.ranks < 1 || o.ranks > 64:
		return fmt.Errorf("--ranks %d: between 1 and 64", o.ranks)
	case o.iters < 1 || o.iters > 100000:
		return fmt.Errorf("--iters %d: between 1 and 100000", o.iters)
	case o.scenario == "job" && o.ranks < 2:
		return fmt.Errorf("--scenario job needs --ranks 2 or more (ranks that wait for each other)")
	case o.scenario == "job" && (o.slowRank < -1 || o.slowRank >= o.ranks):
		return fmt.Errorf("--slow-rank %d: a rank from 0 to %d, or -1 for none", o.slowRank, o.ranks-1)
	case o.slowMs < 0 || o.slowMs > 1000:
		return fmt.Errorf("--slow-ms %g: between 0 and 1000", o.slowMs)
	}
	return nil
}

func runDemo(o demoOptions) error {
	if err := o.check(); err != nil {
		return err
	}
	ncclDir, kinDir := filepath.Join(o.dir, "nccl"), filepath.Join(o.dir, "kineto")
	for _, d := range []string{ncclDir, kinDir} {
		os.RemoveAll(d)
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	if err := o.runRanks(ncclDir); err != nil {
		return err
	}
	traces, _ := filepath.Glob(filepath.Join(ncclDir, "*.trace.json"))
	if len(traces) == 0 {
		return fmt.Errorf("the plugin wrote no trace into %s: this plugin build has no trace writer (NCCLPROF_TRACE=1)", ncclDir)
	}
	kinPaths, err := o.synthesizeKineto(traces, kinDir)
	if err != nil {
		return err
	}
	out := filepath.Join(o.dir, "timeline.json.gz")
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
	page := filepath.Join(o.dir, "report.html")
	causes, err := o.explain(out)
	if err != nil {
		return err
	}
	if err := o.analyse(traces, page, causes); err != nil {
		return err
	}
	fmt.Printf("\nOpen %s in https://ui.perfetto.dev and %s in a browser (the inputs are SIMULATED: the C test host stands in for NCCL and the Kineto traces are synthesized).\n", out, page)
	return nil
}

// runRanks runs the test host once per rank, all at once, as a job's ranks run.
func (o demoOptions) runRanks(ncclDir string) error {
	absLib, _ := filepath.Abs(o.lib)
	args := []string{"--lib", absLib, "--nranks", strconv.Itoa(o.ranks), "--iters", strconv.Itoa(o.iters), "--kernel", "--seed", "7"}
	if o.scenario == "job" {
		// The ranks wait for each other through this file (testhost/job.c); it must start empty.
		sync := filepath.Join(o.dir, "ranks.sync")
		if err := os.WriteFile(sync, nil, 0o644); err != nil {
			return err
		}
		defer os.Remove(sync)
		args = append(args, "--sync", sync, "--slow-rank", strconv.Itoa(o.slowRank), "--slow-us", strconv.FormatFloat(o.slowMs*1000, 'f', -1, 64))
		for _, p := range o.plants() {
			fmt.Printf("planted: %s\n", p)
		}
		if o.slowRank >= 0 {
			fmt.Printf("running %d simulated ranks that wait for each other (%d AllReduces each, %d per step); rank %d arrives %g ms late on every collective of the odd steps …\n",
				o.ranks, o.iters, 5, o.slowRank, o.slowMs)
		} else {
			fmt.Printf("running %d simulated ranks that wait for each other (%d AllReduces each) …\n", o.ranks, o.iters)
		}
	} else {
		fmt.Printf("running %d simulated ranks (%s, %d operations each; these ranks do not wait for each other) …\n", o.ranks, o.scenario, o.iters)
	}
	return runRanks(o.ranks, func(r int) *exec.Cmd {
		cmd := exec.Command(o.host, append(append(append([]string{"--rank", strconv.Itoa(r)}, args...), o.plantArgs(r)...), o.scenario)...)
		cmd.Env = append(os.Environ(), "NCCLPROF_TRACE=1", "NCCLPROF_SIMULATED=1", "NCCLPROF_EVENT_MASK=default,kernelch",
			"NCCLPROF_TRACE_DIR="+ncclDir, "NCCLPROF_OUTPUT_DIR="+ncclDir)
		return cmd
	})
}

// synthesizeKineto writes a torch.profiler-format trace for each plugin trace.
func (o demoOptions) synthesizeKineto(traces []string, kinDir string) ([]string, error) {
	var kinPaths []string
	for _, tp := range traces {
		t, err := ptrace.Read(tp)
		if err != nil {
			return nil, err
		}
		rank := pluginRankOf(t)
		ko := synth.KinetoOptions{Rank: rank, WorldSize: o.ranks, Device: rank % 8}
		if o.scenario == "job" {
			ko.Work = o.work(rank)
		}
		data, n := synth.KinetoFromPlugin(t, ko)
		kp := filepath.Join(kinDir, fmt.Sprintf("%s_%d.simulated.pt.trace.json", t.Host, t.Pid))
		if err := os.WriteFile(kp, data, 0o644); err != nil {
			return nil, err
		}
		fmt.Printf("rank %d: plugin trace %s (%d events); simulated Kineto trace %s (%d NCCL kernels)\n",
			rank, tp, len(t.Events), kp, n)
		kinPaths = append(kinPaths, kp)
	}
	return kinPaths, nil
}

// analyse says which ranks ncclmerge skew finds slow and why (causes: nil when nothing was
// planted) and writes the report.
func (o demoOptions) analyse(traces []string, page string, causes *why.Result) error {
	set, err := commops.Read(traces, commops.Options{})
	if err != nil {
		return err
	}
	res := skew.Analyze(set, skew.Defaults)
	fmt.Println()
	if len(res.Slow) == 0 {
		fmt.Println("ncclmerge skew: no slow rank")
	}
	for _, r := range res.Slow {
		fmt.Printf("ncclmerge skew: rank %d of %s is slow: late on %d of %d collectives, by %.2f ms (median), in %s\n",
			r.Rank, r.Comm, r.Late, r.Matched, float64(r.LateMedianNs)/1e6, stepNames(r.Steps))
	}
	if causes != nil {
		fmt.Printf("\nncclmerge why %s (late by %.2g ms or more):\n", o.dir, o.slowMs/3)
		causes.WriteTable(os.Stdout)
	}
	rep := report.Build(set, stats.Compute(set), res, fmt.Sprintf("ncclmerge demo: %s, SIMULATED", words.Count(o.ranks, "rank")))
	rep.Why = causes
	if err := writeAtomic(page, rep.Write); err != nil {
		return err
	}
	fmt.Printf("wrote %s\n", page)
	return nil
}

func stepNames(steps []skew.StepLate) string {
	if len(steps) == 0 {
		return "no labelled step"
	}
	names := make([]string, len(steps))
	for i, s := range steps {
		names[i] = s.Step
	}
	return strings.Join(names, ", ")
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
