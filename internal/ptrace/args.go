package ptrace

import (
	"github.com/ncclprof/ncclprof/internal/jsonscan"
	"github.com/tidwall/gjson"
)

// The args of a slice are decoded with a scanner of their own rather than gjson: the text was
// validated when the event was read, so it only has to find where each member ends, and most
// values are the plugin's plain forms (a "0x…" handle, a small integer, a string without
// escapes), read directly. Any other form is handed to gjson, so every value reads exactly as
// gjson reads it. (gjson's ForEach was a third of reading a plugin trace.)

// argStr is gjson's Str of a value.
func argStr(raw string) string { return jsonscan.Str(raw) }

// smallInt reads a plain decimal integer of at most 15 digits (exact in a double, so gjson
// reads it the same).
func smallInt(raw string) (int64, bool) {
	i, neg := 0, false
	if len(raw) > 0 && raw[0] == '-' {
		i, neg = 1, true
	}
	if len(raw)-i == 0 || len(raw)-i > 15 {
		return 0, false
	}
	var n int64
	for ; i < len(raw); i++ {
		d := raw[i] - '0'
		if d > 9 {
			return 0, false
		}
		n = n*10 + int64(d)
	}
	if neg {
		n = -n
	}
	return n, true
}

// argInt is gjson's Int of a value.
func argInt(raw string) int64 {
	if n, ok := smallInt(raw); ok {
		return n
	}
	return gjson.Parse(raw).Int()
}

// argUint is gjson's Uint of a value.
func argUint(raw string) uint64 {
	if n, ok := smallInt(raw); ok && n >= 0 {
		return uint64(n)
	}
	return gjson.Parse(raw).Uint()
}

// argBool is gjson's Bool of a value.
func argBool(raw string) bool {
	switch raw {
	case "true":
		return true
	case "false":
		return false
	}
	return gjson.Parse(raw).Bool()
}

// argHandle reads a "0x<hex>" handle (or a plain number), as handle does for a gjson value.
func argHandle(raw string) (uint64, bool) {
	if s, ok := jsonscan.Plain(raw); ok {
		if len(s) == 18 && s[0] == '0' && s[1] == 'x' {
			if h, ok := hex16(s[2:]); ok {
				return h, true
			}
		}
		raw = s
	} else if raw[0] == '"' {
		raw = jsonscan.String(raw)
	}
	h, err := jsonscan.Uint(raw)
	return h, err == nil
}

// hex16 reads the 16 lower-case or upper-case hex digits the plugin writes handles with.
func hex16(s string) (uint64, bool) {
	var h uint64
	for i := 0; i < 16; i++ {
		c := s[i]
		switch {
		case c-'0' <= 9:
			h = h<<4 | uint64(c-'0')
		case c-'a' <= 5:
			h = h<<4 | uint64(c-'a'+10)
		case c-'A' <= 5:
			h = h<<4 | uint64(c-'A'+10)
		default:
			return 0, false
		}
	}
	return h, true
}

// fillArgs sets the NCCL fields of a slice from its args; bad is the key of a handle that is
// not one.
func (e *Fields) fillArgs(args string) (bad string) {
	it := jsonscan.NewObject(args)
	for {
		k, v, ok := it.Next()
		if !ok {
			return ""
		}
		ok = true
		switch k {
		case "id":
			e.ID, ok = argHandle(v)
		case "parent":
			e.Parent, ok = argHandle(v)
		case "comm":
			e.Comm, ok = argHandle(v)
		case "group_api":
			e.GroupAPI, ok = argHandle(v)
		case "op":
			e.Op, ok = argHandle(v)
		case "rank":
			e.Rank = int(argInt(v))
		case "func":
			e.Func = argStr(v)
		case "datatype":
			e.Datatype = argStr(v)
		case "count":
			e.Count = argUint(v)
		case "bytes":
			e.Bytes = argUint(v)
		case "seq":
			e.Seq = argInt(v)
		case "algo":
			e.Algo = argStr(v)
		case "proto":
			e.Proto = argStr(v)
		case "nchannels":
			e.NChannels = int(argInt(v))
		case "channel":
			e.Channel = int(argInt(v))
		case "peer":
			e.Peer = int(argInt(v))
		case "gpu_start_ns":
			// Decimal strings: a double would lose the low bits of a globaltimer value.
			e.GPUStart, _ = jsonscan.Int(v)
		case "gpu_stop_ns":
			e.GPUStop, _ = jsonscan.Int(v)
		case "group":
			e.Group, ok = argHandle(v)
		case "graph_captured", "graph_replay":
			e.Graph = argBool(v)
		case "is_send":
			e.IsSend = argBool(v)
		case "trans_size":
			e.TransSize = argInt(v)
		case "traced":
			e.Traced = argStr(v)
		}
		if !ok {
			return k
		}
	}
}
