package kineto

import (
	"strings"

	"github.com/ncclprof/ncclprof/internal/jsonscan"
	"github.com/ncclprof/ncclprof/internal/traceevent"
	"github.com/tidwall/gjson"
)

// CommsArgs are the collective arguments PyTorch records on record_param_comms and Kineto
// copies onto the NCCL kernel (2023-10 and later; absent in older traces).
type CommsArgs struct {
	Collective string // c10d name: "allreduce", "_allgather_base", "send", …
	Dtype      string // PyTorch dtype: "Float", "BFloat16", …
	InNelems   int64
	OutNelems  int64
	GroupSize  int
	PGName     string // "Process Group Name" ("Process Group ID" before 2024-04)
	PGDesc     string
	PGRanks    string
	Seq        int64 // c10d per-PG sequence number (not NCCL's); -1 when absent
	CommsID    uint64
	HasCommsID bool
	Present    bool // the kernel carries collective args at all
}

// Comms reads the collective arguments of an event.
func (e *Event) Comms() CommsArgs {
	c, _, _ := comms(&e.Event)
	return c
}

// comms reads the collective arguments of an event, and the raw values of the first "Input
// Dims" and "Input type" (older record_functions' shape and type of the input). The args were
// validated when the event was read: they are walked with jsonscan.Object, each value read as
// gjson reads it (its ForEach, where the last of a repeated key wins; its Get, where the first
// does), at a fraction of gjson's cost (it ran for every kernel and launch call).
func comms(e *traceevent.Event) (c CommsArgs, dims, types string) {
	c = CommsArgs{Seq: -1, InNelems: -1, OutNelems: -1}
	if !e.ArgsSpan.Valid() {
		return c, "", ""
	}
	it := jsonscan.NewObject(e.Raw[e.ArgsSpan.Start:e.ArgsSpan.End])
	for {
		k, v, ok := it.Next()
		if !ok {
			return c, dims, types
		}
		switch k {
		case "Collective name":
			c.Collective, c.Present = jsonscan.Str(v), true
		case "dtype":
			c.Dtype = jsonscan.Str(v)
		case "In msg nelems":
			c.InNelems, _ = jsonscan.Int(v)
		case "Out msg nelems":
			c.OutNelems, _ = jsonscan.Int(v)
		case "Group size":
			g, _ := jsonscan.Int(v)
			c.GroupSize = int(g)
		case "Process Group Name", "Process Group ID":
			c.PGName = jsonscan.Text(v)
		case "Process Group Description":
			c.PGDesc = jsonscan.Str(v)
		case "Process Group Ranks":
			c.PGRanks = jsonscan.Text(v)
		case "Seq":
			if s, err := jsonscan.Int(v); err == nil {
				c.Seq = s
			}
		case "Comms Id":
			// Above int64 in real traces: parse the text as uint64.
			if id, err := jsonscan.Uint(v); err == nil {
				c.CommsID, c.HasCommsID = id, true
			}
		case "Input Dims":
			if dims == "" {
				dims = v
			}
		case "Input type":
			if types == "" {
				types = v
			}
		}
	}
}

// Correlation is the CUPTI correlation id of a runtime call or GPU activity (0 when absent).
func (e *Event) Correlation() uint64 { return correlation(&e.Event) }

func correlation(e *traceevent.Event) uint64 {
	if !e.ArgsSpan.Valid() {
		return 0
	}
	v, ok := jsonscan.NewObject(e.Raw[e.ArgsSpan.Start:e.ArgsSpan.End]).Find("correlation")
	if !ok {
		return 0
	}
	id, err := jsonscan.Uint(v)
	if err != nil {
		return 0
	}
	return id
}

// AnnotationComms reads what PyTorch recorded on a collective's record_function before the
// kernel carried it (2023 and earlier): an "nccl:<c10d name>" annotation (user_annotation,
// or cpu_op in some versions) whose "Input Dims" give the input tensor's shape and "Input
// type" its dtype. ok is false for other events. Newer annotations and record_param_comms
// carry the kernel's fields ("In msg nelems", "dtype"), which win where present.
func (e *Event) AnnotationComms() (c CommsArgs, ok bool) { return annotationComms(&e.Event, e.Cat) }

func annotationComms(e *traceevent.Event, cat Cat) (c CommsArgs, ok bool) {
	switch {
	case cat != CatUserAnnotation && cat != CatCPUOp:
		return c, false
	case strings.HasPrefix(e.Name, "nccl:"):
	case e.Name == "record_param_comms":
	default:
		return c, false
	}
	c, dims, types := comms(e)
	if c.Collective == "" {
		c.Collective = strings.TrimPrefix(e.Name, "nccl:")
	}
	c.Present = true
	if c.InNelems < 0 && dims != "" {
		if d := gjson.Parse(dims).Get("0"); d.IsArray() {
			c.InNelems = 1
			for _, n := range d.Array() {
				c.InNelems *= n.Int()
			}
		}
	}
	if c.Dtype == "" && types != "" {
		c.Dtype = torchType(gjson.Parse(types).Get("0").Str)
	}
	return c, true
}

// torchType maps the C++ type names of "Input type" (c10::toString of a tensor's dtype in
// older profilers: "float", "c10::Half", "long int") to PyTorch's ScalarType names ("" if
// unknown), which collective.Datatype reads.
func torchType(t string) string {
	switch strings.TrimPrefix(t, "c10::") {
	case "float":
		return "Float"
	case "double":
		return "Double"
	case "Half", "half":
		return "Half"
	case "BFloat16":
		return "BFloat16"
	case "int":
		return "Int"
	case "long", "long int", "int64_t":
		return "Long"
	case "signed char", "int8_t":
		return "Char"
	case "unsigned char", "uint8_t":
		return "Byte"
	case "bool":
		return "Bool"
	}
	return ""
}
