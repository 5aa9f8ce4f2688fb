package jsonscan

import (
	"math/bits"
	"strings"

	"github.com/tidwall/gjson"
)

// Object walks the members of an object that was validated already (by Skip or a reader
// built on it): it only has to find where each key and value ends, which costs a fraction of
// validating them again or of gjson's walk. Values are returned raw; Str and Text read them as
// gjson's Str and String do.
type Object struct {
	s string
	i int
}

// NewObject starts a walk of obj, the validated text of an object ('{' … '}').
func NewObject(obj string) Object { return Object{s: obj, i: 1} }

// Next returns the next member's key (unescaped) and raw value, or ok == false at the end.
func (o *Object) Next() (key, raw string, ok bool) {
	s := o.s
	i := SkipWS(s, o.i)
	if i < len(s) && s[i] == ',' {
		i = SkipWS(s, i+1)
	}
	if i >= len(s) || s[i] != '"' {
		return "", "", false // the closing '}'
	}
	ke, plain := stringEnd(s, i)
	key = s[i+1 : ke-1]
	if !plain {
		key = String(s[i:ke])
	}
	i = SkipWS(s, ke)
	i = SkipWS(s, i+1) // past the ':'
	v := i
	i = SkipValid(s, i)
	o.i = i
	return key, s[v:i], true
}

// Find returns the raw value of the first member named key, as gjson's Get finds it.
func (o Object) Find(key string) (string, bool) {
	for {
		k, v, ok := o.Next()
		if !ok {
			return "", false
		}
		if k == key {
			return v, true
		}
	}
}

// stringEnd returns the end of the validated string at s[i], and whether it has no escape.
func stringEnd(s string, i int) (int, bool) {
	plain := true
	for i++; ; {
		// Eight bytes at a time to the next quote or backslash.
		for i+8 <= len(s) {
			x := load8(s, i)
			q, b := x^(ones*'"'), x^(ones*'\\')
			if m := ((q-ones)&^q | (b-ones)&^b) & highs; m != 0 {
				i += bits.TrailingZeros64(m) >> 3
				break
			}
			i += 8
		}
		for i < len(s) && s[i] != '"' && s[i] != '\\' {
			i++
		}
		switch {
		case i >= len(s):
			return len(s), plain
		case s[i] == '"':
			return i + 1, plain
		}
		plain = false
		i += 2 // an escape: the byte after the backslash is never the string's end
	}
}

// StringEnd returns the end of the string at s[i] of a document validated already, and
// whether it is plain (holds no escape).
func StringEnd(s string, i int) (int, bool) { return stringEnd(s, i) }

// SkipValid returns the end of the value at s[i] of a document validated already: it finds
// only where the value ends, at a fraction of the cost of validating it again.
func SkipValid(s string, i int) int {
	switch s[i] {
	case '"':
		end, _ := stringEnd(s, i)
		return end
	case '{', '[':
		depth := 0
		for i < len(s) {
			switch s[i] {
			case '"':
				i, _ = stringEnd(s, i)
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1
				}
			}
			i++
		}
		return i
	}
	for i < len(s) && s[i] != ',' && s[i] != '}' && s[i] != ']' && s[i] > ' ' {
		i++
	}
	return i
}

// Plain returns the content of a raw string value without escapes.
func Plain(raw string) (string, bool) {
	if len(raw) < 2 || raw[0] != '"' || strings.IndexByte(raw, '\\') >= 0 {
		return "", false
	}
	return raw[1 : len(raw)-1], true
}

// Str is gjson's Str of a raw value: a string's content, "" for anything else.
func Str(raw string) string {
	if s, ok := Plain(raw); ok {
		return s
	}
	if raw == "" || raw[0] != '"' {
		return ""
	}
	return String(raw)
}

// Text is gjson's String of a raw value: a string's content, an integer's or a literal's text,
// and gjson's formatting of anything else.
func Text(raw string) string {
	if s, ok := Plain(raw); ok {
		return s
	}
	return gjson.Parse(raw).String()
}
