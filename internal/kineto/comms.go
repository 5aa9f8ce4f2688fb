package kineto

import (
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
