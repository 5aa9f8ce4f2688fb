package main

import (
	"fmt"
	"strconv"

	"github.com/ncclprof/ncclprof/internal/commops"
	"github.com/ncclprof/ncclprof/internal/synth"
	"github.com/ncclprof/ncclprof/internal/why"
)

// demoPlant is a cause of lateness the demo plants: on a rank, before one collective (its seq:
// the demo's ranks run one AllReduce each operation).
type demoPlant struct {
	cause string
	rank  int
	op    int
}

func (p demoPlant) String() string {
	return fmt.Sprintf("%s on rank %d, collective %d (step %d)", p.cause, p.rank, p.op, p.op/demoStepOps)
}

// demoStepOps: collectives per training step (testhost/job.c, JOB_STEP_OPS).
const demoStepOps = 5

// plants are the causes the job scenario plants, each --slow-ms long: the slow rank's data
// loading before the first collective of each odd step (the rest of the step carries it over),
// then one of each other kind on the ranks after it. Nothing is planted without a slow rank.
func (o demoOptions) plants() []demoPlant {
	if o.scenario != "job" || o.slowRank < 0 {
		return nil
	}
	var out []demoPlant
	for op := demoStepOps; op < o.iters; op += 2 * demoStepOps {
		out = append(out, demoPlant{why.Host, o.slowRank, op})
	}
	for _, p := range []demoPlant{{why.GPUCompute, 1, 10}, {why.Dependency, 2, 2}, {why.Network, 3, 12}} {
		p.rank = (o.slowRank + p.rank) % o.ranks
		if p.op < o.iters {
			out = append(out, p)
		}
	}
	return out
}

// plantArgs are the test host's options that plant rank r's late GPU and slow sends (its late
// CPU is --slow-rank's).
func (o demoOptions) plantArgs(r int) []string {
	var args []string
	for _, p := range o.plants() {
		switch {
		case p.rank != r:
		case p.cause == why.GPUCompute || p.cause == why.Dependency:
			args = append(args, "--gpu-late-op", strconv.Itoa(p.op))
		case p.cause == why.Network:
			args = append(args, "--net-slow-op", strconv.Itoa(p.op))
		}
	}
	return args
}

// work is rank r's simulated compute, with what its Kineto trace shows of the causes planted on
// it: the data loader, longer compute kernels, a copy on another stream.
func (o demoOptions) work(r int) *synth.Work {
	w := synth.DefaultWork()
	for _, p := range o.plants() {
		if p.rank == r && p.cause != why.Network {
			w.Plants = append(w.Plants, synth.Plant{Cause: p.cause, Seq: int64(p.op), Ns: int64(o.slowMs * 1e6)})
		}
	}
	return w
}

// explain runs ncclmerge why on the timeline (nil when nothing was planted).
func (o demoOptions) explain(timeline string) (*why.Result, error) {
	if len(o.plants()) == 0 {
		return nil, nil
	}
	set, err := commops.Read([]string{timeline}, commops.Options{})
	if err != nil {
		return nil, err
	}
	acts, err := why.ReadAll(set)
	if err != nil {
		return nil, err
	}
	opt := why.Defaults
	// The test host runs on a shared machine: its arrivals are off their plan by up to a few
	// hundred µs now and then. Causes are asked of what is late by a third of the plants or more.
	opt.Skew.MinLateNs = max(opt.Skew.MinLateNs, int64(o.slowMs*1e6/3))
	return why.Analyze(set, acts, opt), nil
}
