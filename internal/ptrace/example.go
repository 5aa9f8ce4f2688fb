package ptrace

import (
	"bytes"
	"strconv"

	"github.com/ncclprof/ncclprof/internal/jsonscan"
	"github.com/ncclprof/ncclprof/internal/traceevent"
)

// NCCL's example profiler plugin writes one file per communicator: '[', then async b/e events
// whose cat is the event type in capitals, then a "{}]" sentinel. Its times are µs since the
// plugin started (steady_clock), every event has tid 1, and events carry no parent handles.

var exampleCats = map[string]Kind{
	"GROUP_API": GroupAPI, "COLL_API": CollAPI, "P2P_API": P2pAPI, "KERNEL_LAUNCH": KernelLaunch,
	"GROUP": Group, "COLL": Coll, "P2P": P2p, "PROXY": ProxyOp, "NET": StepState, "GPU": KernelCh,
	"NET_IB": Net, "NET_SOCK": Net,
}

// looksLikeExamplePlugin reports whether data is the example plugin's output: a bare array
// whose first event has one of its categories.
func looksLikeExamplePlugin(data []byte) bool {
	d := bytes.TrimLeft(data, " \t\r\n")
	if len(d) == 0 || d[0] != '[' {
		return false
	}
	head := d[:min(len(d), 4096)]
	for cat := range exampleCats {
		if bytes.Contains(head, []byte(`"cat": "`+cat+`"`)) || bytes.Contains(head, []byte(`"cat":"`+cat+`"`)) {
			return true
		}
	}
	return false
}

// QuoteBareWords returns data with unquoted words in value position quoted: NCCL 2.28–2.29.2
// print `"datatype": ncclFloat32` and `"Stream": 0x262ca50`. Numbers, true, false and null are
// left alone. Only the small example-plugin files go through this copy.
func QuoteBareWords(data []byte) []byte {
	out := make([]byte, 0, len(data)+len(data)/32)
	inStr := false
	for i := 0; i < len(data); i++ {
		c := data[i]
		if inStr {
			out = append(out, c)
			if c == '\\' && i+1 < len(data) {
				i++
				out = append(out, data[i])
			} else if c == '"' {
				inStr = false
			}
			continue
		}
		if c == '"' {
			inStr = true
			out = append(out, c)
			continue
		}
		if isWordStart(c) && afterColon(out) {
			j := i
			for j < len(data) && isWordByte(data[j]) {
				j++
			}
			w := data[i:j]
			if isLiteralOrNumber(w) {
				out = append(out, w...)
			} else {
				out = append(out, '"')
				out = append(out, w...)
				out = append(out, '"')
			}
			i = j - 1
			continue
		}
		out = append(out, c)
	}
	return out
}

func isWordStart(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '(' || c == '.'
}

func isWordByte(c byte) bool {
	return isWordStart(c) || c == '+' || c == ')'
}

// afterColon reports whether the last non-space output byte is ':' (a value position).
func afterColon(out []byte) bool {
	for k := len(out) - 1; k >= 0; k-- {
		switch out[k] {
		case ' ', '\t', '\n', '\r':
			continue
		case ':':
			return true
		}
		return false
	}
	return false
}

func isLiteralOrNumber(w []byte) bool {
	switch string(w) {
	case "true", "false", "null":
		return true
	}
	_, err := jsonscan.Scaled(string(w), 0)
	return err == nil || err == jsonscan.ErrRange
}

// parseExample reads the example plugin's output into the common model: each b/e pair becomes
// a slice (on the b event, Kind set; the e event is kept for output with KindOther).
func parseExample(path string, data []byte) (*Trace, error) {
	fixed := QuoteBareWords(data)
	t := &Trace{Unanchored: true}
	doc, err := traceevent.Read(path, fixed, traceevent.Options{Truncated: true, Hint: syntaxHint},
		func(e *traceevent.Event) error {
			if e.Raw != "{}" {
				t.Events = append(t.Events, Event{Event: *e, Fields: Fields{Seq: -1}})
			}
			return nil
		})
	if err != nil {
		return nil, err
	}
	t.Doc = doc
	t.Complete = !doc.Truncated
	open := map[string][]int{} // (cat, id, name) → indexes of open b events
	for i := range t.Events {
		e := &t.Events[i]
		e.Start = e.Ts
		if t.Pid == 0 && !e.Pid.IsStr {
			t.Pid = e.Pid.Num
		}
		key := e.Cat + "\x00" + e.IDRaw + "\x00" + e.Name
		switch e.Ph {
		case "b":
			open[key] = append(open[key], i)
		case "e":
			st := open[key]
			if len(st) == 0 {
				continue
			}
			b := &t.Events[st[len(st)-1]]
			open[key] = st[:len(st)-1]
			b.End = e.Ts
			b.Dur = e.Ts - b.Ts
			b.HasDur = true
			t.fillExample(b)
		}
	}
	return t, nil
}

// fillExample sets the NCCL fields of a paired example-plugin slice.
func (t *Trace) fillExample(e *Event) {
	e.Kind = exampleCats[e.Cat]
	switch e.Name {
	case "Idle", "Sleep", "Append":
		e.Kind = ProxyCtrl
	case "KernelStep":
		e.Kind = KindOther
	}
	args := e.ArgsResult()
	str := func(k string) string { return args.Get(k).String() }
	num := func(k string) uint64 {
		v, _ := jsonscan.Uint(args.Get(k).Raw)
		return v
	}
	switch e.Kind {
	case Coll, P2p, CollAPI, P2pAPI:
		e.Func = e.Name
		e.Count = num("Count") + num("count")
		e.Datatype = str("Datatype") + str("datatype")
		e.Rank = int(args.Get("Rank").Int())
		if h := args.Get("CommHash"); h.Exists() {
			// Printed with %lu: a decimal uint64.
			e.Comm, _ = strconv.ParseUint(h.Raw, 10, 64)
		}
		if s := args.Get("SeqNum"); s.Exists() {
			e.Seq = s.Int()
		}
		e.Algo, e.Proto = str("Algorithm"), str("Protocol")
		e.NChannels = int(args.Get("nChannels").Int())
		e.Peer = int(args.Get("Peer").Int())
		if e.Comm != 0 {
			t.addComm(Comm{Hash: e.Comm, Rank: e.Rank, Name: strconv.FormatUint(e.Comm, 16)})
		}
	case KernelCh:
		e.Channel = int(args.Get("Channel").Int())
		e.GPUStart, e.GPUStop = int64(num("StartGpuClk")), int64(num("StopGpuClk"))
	case ProxyOp:
		e.Channel = int(args.Get("Channel").Int())
		e.Peer = int(args.Get("Peer").Int())
	}
}

// IsSlice reports whether the event is an interval the linker can use: an X slice, or a paired
// b event of an example-plugin trace.
func (e *Event) IsSlice() bool {
	return e.Ph == "X" || (e.Ph == "b" && e.HasDur)
}
