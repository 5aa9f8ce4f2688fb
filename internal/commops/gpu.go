package commops

import "github.com/ncclprof/ncclprof/internal/ptrace"

// gpuArrivals gathers, while a file is read, when each operation started on its GPU: its
// earliest KernelCh start that the plugin placed by its GPU clock, and its earliest release from
// SendGPUWait. A state slice names no parent: the plugin writes it nested in time in the step
// just written before it (drainer/trace.go, emitStates), whose parent is a ProxyOp, whose parent
// is the operation. Events arrive in any order, so the chain is resolved at the end.
type gpuArrivals struct {
	kernelCh map[opKey]int64  // operation → earliest KernelCh start
	proxyOf  map[opKey]uint64 // ProxyOp → its operation
	released map[opKey]int64  // ProxyOp → earliest SendGPUWait release of its step 0
	step     struct {         // the last "Step 0" read: its ProxyOp and span
		proxy      opKey
		start, end int64
	}
}

func (g *gpuArrivals) see(e *ptrace.Event) {
	group := e.Pid.Num >> timelineShift
	switch e.Kind {
	case ptrace.KernelCh:
		if e.Arg("clock").Str != "gpu" {
			return
		}
		k := opKey{group, e.Op}
		if g.kernelCh == nil {
			g.kernelCh = map[opKey]int64{}
		}
		if v, ok := g.kernelCh[k]; !ok || e.Start < v {
			g.kernelCh[k] = e.Start
		}
	case ptrace.ProxyOp:
		if !e.IsSend {
			return
		}
		if g.proxyOf == nil {
			g.proxyOf = map[opKey]uint64{}
		}
		g.proxyOf[opKey{group, e.ID}] = e.Parent
	case ptrace.ProxyStep:
		g.step.proxy, g.step.start, g.step.end = opKey{group, e.Parent}, e.Start, e.End
	}
}

// release takes a SendGPUWait state slice [start, end] (ns as written) of a process group.
func (g *gpuArrivals) release(group, start, end int64) {
	s := &g.step
	if s.proxy.group != group || start < s.start || end > s.end {
		return // not inside the last first step read
	}
	if g.released == nil {
		g.released = map[opKey]int64{}
	}
	if v, ok := g.released[s.proxy]; !ok || end < v {
		g.released[s.proxy] = end
	}
}

// apply gives the operations read their GPU arrivals (before the file's base is added).
func (r *reader) applyGPU() {
	set := func(k opKey, at int64, from GPUSource) {
		if i, ok := r.keys[k]; ok {
			o := &r.p.ops[i]
			if from.better(o.GPUFrom) || from == o.GPUFrom && at < o.GPUArrive {
				o.GPUArrive, o.GPUFrom = at, from
			}
		}
	}
	for k, at := range r.gpu.kernelCh {
		set(k, at, FromKernelCh)
	}
	for p, at := range r.gpu.released {
		if op, ok := r.gpu.proxyOf[p]; ok {
			set(opKey{p.group, op}, at, FromSendGPUWait)
		}
	}
	r.gpu = gpuArrivals{}
}
