package kineto

import "github.com/ncclprof/ncclprof/internal/traceevent"

// Cat is an event category with the aliases of every Kineto era folded together.
type Cat uint8

// Categories ncclmerge tells apart; everything else is CatOther.
const (
	CatOther Cat = iota
	CatCPUOp
	CatUserAnnotation
	CatRuntime // cuda_runtime; "Runtime" in 2021 traces
	CatDriver  // cuda_driver
	CatKernel  // kernel; "Kernel" in 2021 traces
	CatMemcpy
	CatMemset
	CatGPUAnnotation
	CatAC2G // ac2g flows; "async_cpu_to_gpu" (2022) and "async" (2021)
	CatPython
)

// CatOf folds a raw category into a Cat. (A switch: this runs for every event, and a map
// lookup hashes the string each time.)
func CatOf(raw string) Cat {
	switch raw {
	case "cpu_op", "Operator":
		return CatCPUOp
	case "user_annotation":
		return CatUserAnnotation
	case "cuda_runtime", "Runtime":
		return CatRuntime
	case "cuda_driver":
		return CatDriver
	case "kernel", "Kernel":
		return CatKernel
	case "gpu_memcpy", "Memcpy":
		return CatMemcpy
	case "gpu_memset", "Memset":
		return CatMemset
	case "gpu_user_annotation":
		return CatGPUAnnotation
	case "ac2g", "async_cpu_to_gpu", "async":
		return CatAC2G
	case "python_function":
		return CatPython
	}
	return CatOther
}

// Event is a trace event with its category folded across eras.
type Event struct {
	traceevent.Event
	Cat Cat
	// Decoded is what Options.Decode read from the event's args (nil without it); it is
	// valid during the visit only.
	Decoded *Decoded
}

// Decoded is what a reader linking kernels takes from an event's args, read on the goroutines
// that parse the file (see Options.Decode): walking the args of every launch call, kernel and
// collective record_function on the one goroutine that visits events was a third of its work.
type Decoded struct {
	// Launch: a runtime or driver call that launches a kernel or a CUDA graph.
	Launch bool
	// Corr is the correlation of a launch call or a kernel.
	Corr uint64
	// NCCL: an NCCL kernel, whose collective args are Comms.
	NCCL bool
	// Annotation: a collective record_function, whose args are Comms (AnnotationComms).
	Annotation bool
	Comms      CommsArgs
	// FlowID is a flow event's id as traceevent.FlowID reads it (FlowIDOK: it is one).
	FlowID   uint64
	FlowIDOK bool
}

// decode reads e's Decoded facts.
func decode(e *traceevent.Event, d *Decoded) {
	switch e.Ph {
	case "s", "t", "f":
		d.FlowID, d.FlowIDOK = traceevent.FlowID(e.IDRaw)
		return
	case "X":
	default:
		return
	}
	switch cat := CatOf(e.Cat); cat {
	case CatRuntime, CatDriver:
		if IsLaunch(e.Name) || IsGraphLaunch(e.Name) {
			d.Launch, d.Corr = true, correlation(e)
		}
	case CatKernel:
		d.Corr = correlation(e)
		if IsNCCLKernel(e.Name) {
			d.NCCL = true
			d.Comms, _, _ = comms(e)
		}
	case CatUserAnnotation, CatCPUOp:
		d.Comms, d.Annotation = annotationComms(e, cat)
	}
}

// ID is a pid or tid (a number or a string).
type ID = traceevent.ID
