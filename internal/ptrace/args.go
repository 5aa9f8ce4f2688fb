package ptrace

import (
	"strings"

	"github.com/ncclprof/ncclprof/internal/jsonscan"
	"github.com/tidwall/gjson"
)

// The args of a slice are decoded with a scanner of their own rather than gjson: the text was
// validated when the event was read, so it only has to find where each member ends, and most
// values are the plugin's plain forms (a "0x…" handle, a small integer, a string without
// escapes), read directly. Any other form is handed to gjson, so every value reads exactly as
// gjson reads it. (gjson's ForEach was a third of reading a plugin trace.)

// argIter walks the members of a validated JSON object.
type argIter struct {
	s string
	i int
}

func newArgIter(obj string) argIter { return argIter{s: obj, i: 1} }

// next returns the next member's key (unescaped) and raw value, or ok == false at the end.
func (it *argIter) next() (key, raw string, ok bool) {
	s := it.s
	i := skipWS(s, it.i)
	if i < len(s) && s[i] == ',' {
		i = skipWS(s, i+1)
	}
	if i >= len(s) || s[i] != '"' {
		return "", "", false // the closing '}'
	}
	ke, plain := stringEnd(s, i)
	key = s[i+1 : ke-1]
	if !plain {
		key = jsonscan.String(s[i:ke])
	}
	i = skipWS(s, ke)
	i = skipWS(s, i+1) // the ':'
	v := i
	switch c := s[i]; c {
	case '"':
		i, _ = stringEnd(s, i)
	case '{', '[':
		i, _ = jsonscan.Skip(s, i)
	default:
		for i < len(s) && s[i] != ',' && s[i] != '}' && s[i] != ']' && s[i] > ' ' {
			i++
		}
	}
	it.i = i
	return key, s[v:i], true
}

// stringEnd returns the end of the validated string at s[i], and whether it has no escape.
func stringEnd(s string, i int) (int, bool) {
	plain := true
	for i++; i < len(s); i++ {
		switch s[i] {
		case '"':
			return i + 1, plain
		case '\\':
			plain = false
			i++
		}
	}
	return len(s), plain
}

func skipWS(s string, i int) int {
	for i < len(s) && (s[i] == ' ' || s[i] == '\n' || s[i] == '\r' || s[i] == '\t') {
		i++
	}
	return i
}

// plainString is the content of a string value without escapes.
func plainString(raw string) (string, bool) {
	if len(raw) < 2 || raw[0] != '"' || strings.IndexByte(raw, '\\') >= 0 {
		return "", false
	}
	return raw[1 : len(raw)-1], true
}

// argStr is gjson's Str of a value: a string's content, "" for anything else.
func argStr(raw string) string {
	if s, ok := plainString(raw); ok {
		return s
	}
	if raw[0] != '"' {
		return ""
	}
	return jsonscan.String(raw)
}

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
	if s, ok := plainString(raw); ok {
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
	it := newArgIter(args)
	for {
		k, v, ok := it.next()
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
		case "graph_captured":
			e.Graph = argBool(v)
		}
		if !ok {
			return k
		}
	}
}
