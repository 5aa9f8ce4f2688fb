package kineto

import (
	"strings"

	"github.com/ncclprof/ncclprof/internal/jsonscan"
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
	c := CommsArgs{Seq: -1, InNelems: -1, OutNelems: -1}
	args := e.Args()
	if !args.Exists() {
		return c
	}
	args.ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "Collective name":
			c.Collective, c.Present = v.Str, true
		case "dtype":
			c.Dtype = v.Str
		case "In msg nelems":
			c.InNelems, _ = jsonscan.Int(v.Raw)
		case "Out msg nelems":
			c.OutNelems, _ = jsonscan.Int(v.Raw)
		case "Group size":
			g, _ := jsonscan.Int(v.Raw)
			c.GroupSize = int(g)
		case "Process Group Name", "Process Group ID":
			c.PGName = v.String()
		case "Process Group Description":
			c.PGDesc = v.Str
		case "Process Group Ranks":
			c.PGRanks = v.String()
		case "Seq":
			if s, err := jsonscan.Int(v.Raw); err == nil {
				c.Seq = s
			}
		case "Comms Id":
			// Above int64 in real traces: parse the text as uint64.
			if id, err := jsonscan.Uint(v.Raw); err == nil {
				c.CommsID, c.HasCommsID = id, true
			}
		}
		return true
	})
	return c
}

// Correlation is the CUPTI correlation id of a runtime call or GPU activity (0 when absent).
func (e *Event) Correlation() uint64 {
	v := e.Arg("correlation")
	if !v.Exists() {
		return 0
	}
	id, err := jsonscan.Uint(v.Raw)
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
func (e *Event) AnnotationComms() (c CommsArgs, ok bool) {
	switch {
	case e.Cat != CatUserAnnotation && e.Cat != CatCPUOp:
		return c, false
	case strings.HasPrefix(e.Name, "nccl:"):
	case e.Name == "record_param_comms":
	default:
		return c, false
	}
	c = e.Comms()
	if c.Collective == "" {
		c.Collective = strings.TrimPrefix(e.Name, "nccl:")
	}
	c.Present = true
	args := e.Args()
	if c.InNelems < 0 {
		if dims := args.Get(`Input Dims.0`); dims.IsArray() {
			c.InNelems = 1
			for _, d := range dims.Array() {
				c.InNelems *= d.Int()
			}
		}
	}
	if c.Dtype == "" {
		c.Dtype = torchType(args.Get(`Input type.0`).Str)
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
