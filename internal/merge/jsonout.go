package merge

import (
	"strconv"

	"github.com/ncclprof/ncclprof/internal/chrome"
	"github.com/ncclprof/ncclprof/internal/jsonscan"
)

// obj appends a JSON object member by member, in a fixed order (outputs are compared with
// golden files), without reflection.
type obj struct {
	b     []byte
	first bool
}

func newObj(b []byte) *obj { return &obj{b: append(b, '{'), first: true} }

// key starts a member (keys are plain ASCII names: quoted as they are).
func (o *obj) key(k string) *obj {
	if !o.first {
		o.b = append(o.b, ',')
	}
	o.first = false
	o.b = append(o.b, '"')
	o.b = append(o.b, k...)
	o.b = append(o.b, '"', ':')
	return o
}

func (o *obj) str(k, v string) *obj {
	o.key(k)
	o.b = appendJSONString(o.b, v)
	return o
}

func (o *obj) int(k string, v int64) *obj {
	o.key(k)
	o.b = strconv.AppendInt(o.b, v, 10)
	return o
}

func (o *obj) uint(k string, v uint64) *obj {
	o.key(k)
	o.b = strconv.AppendUint(o.b, v, 10)
	return o
}

func (o *obj) float(k string, v float64) *obj {
	o.key(k)
	o.b = strconv.AppendFloat(o.b, v, 'f', 3, 64)
	return o
}

func (o *obj) micros(k string, ns int64) *obj {
	o.key(k)
	o.b = jsonscan.AppendMicros(o.b, ns)
	return o
}

func (o *obj) raw(k string, v []byte) *obj {
	o.key(k)
	o.b = append(o.b, v...)
	return o
}

func (o *obj) rawString(k, v string) *obj {
	o.key(k)
	o.b = append(o.b, v...)
	return o
}

func (o *obj) bool(k string, v bool) *obj {
	o.key(k)
	o.b = strconv.AppendBool(o.b, v)
	return o
}

func (o *obj) done() []byte { return append(o.b, '}') }

// appendJSONString quotes s as JSON, as the plugin's trace writer does.
func appendJSONString(b []byte, s string) []byte { return chrome.AppendString(b, s) }

// hex adds a handle as the plugin writes it, "0x" and 16 hex digits, quoted.
func (o *obj) hex(k string, h uint64) *obj {
	o.key(k)
	o.b = appendHex(o.b, h)
	return o
}

// decimal adds an integer as a decimal string: the plugin's 64-bit clock values are written
// so, as a double would lose their low bits.
func (o *obj) decimal(k string, v int64) *obj {
	o.key(k)
	o.b = append(strconv.AppendInt(append(o.b, '"'), v, 10), '"')
	return o
}

// object starts a member whose value is an object; close it with done, then end.
func (o *obj) object(k string) *obj {
	o.key(k)
	return newObj(o.b)
}

// end takes back the buffer of a member object closed with done.
func (o *obj) end(b []byte) *obj {
	o.b = b
	return o
}

func appendHex(b []byte, h uint64) []byte {
	const digits = "0123456789abcdef"
	b = append(b, '"', '0', 'x')
	for s := 60; s >= 0; s -= 4 {
		b = append(b, digits[(h>>uint(s))&0xf])
	}
	return append(b, '"')
}

func hexHandle(h uint64) string {
	const digits = "0123456789abcdef"
	var b [18]byte
	b[0], b[1] = '0', 'x'
	for i := 17; i >= 2; i-- {
		b[i] = digits[h&0xf]
		h >>= 4
	}
	return string(b[:])
}
