package jsonscan

import (
	"strings"

	"github.com/tidwall/gjson"
)

// Array walks the elements of a JSON array one at a time, validating each element as it goes.
type Array struct {
	s     string
	i     int
	first bool
	// End is the index just past the closing ']' once Next has returned ok == false with no
	// error.
	End int
}

// NewArray starts a walk of the array whose '[' is at s[i] (after optional whitespace).
func NewArray(s string, i int) (*Array, error) {
	i = SkipWS(s, i)
	if i >= len(s) || s[i] != '[' {
		return nil, errAt(i, "unexpected %s, an array was expected", describe(s, i))
	}
	return &Array{s: s, i: i + 1, first: true}, nil
}

// Pos is the offset the walk has reached: just past the last element returned.
func (a *Array) Pos() int { return a.i }

// Next validates the next element and returns its bounds, or ok == false at the closing
// bracket. An error (a *Error) names the offset of the problem; a document that ends early
// gives an error whose offset is len(s).
func (a *Array) Next() (start, end int, ok bool, err error) {
	s := a.s
	i := SkipWS(s, a.i)
	if i >= len(s) {
		return i, i, false, errAt(i, "unexpected end of input inside an array")
	}
	if s[i] == ']' {
		a.i, a.End = i+1, i+1
		return i, i, false, nil
	}
	if !a.first {
		if s[i] != ',' {
			return i, i, false, errAt(i, "unexpected %s in an array, ',' or ']' was expected", describe(s, i))
		}
		i = SkipWS(s, i+1)
	}
	a.first = false
	end, err = Skip(s, i)
	if err != nil {
		return i, end, false, err
	}
	a.i = end
	return i, end, true, nil
}

// Members walks the members of the object whose '{' is at s[i]. For each member it calls fn
// with the raw key (the text between the quotes) and the offset of the value; fn validates the
// value (with Skip, or its own walk for a value it reads element by element) and returns the
// index just past it. Members returns the index just past the closing '}'.
func Members(s string, i int, fn func(key string, vstart int) (vend int, err error)) (int, error) {
	i = SkipWS(s, i)
	if i >= len(s) || s[i] != '{' {
		return i, errAt(i, "unexpected %s, an object was expected", describe(s, i))
	}
	i = SkipWS(s, i+1)
	if i < len(s) && s[i] == '}' {
		return i + 1, nil
	}
	for {
		ks := i
		v, ke, err := skipKeyEnd(s, i)
		if err != nil {
			return v, err
		}
		ve, err := fn(s[ks+1:ke], v)
		if err != nil {
			return ve, err
		}
		i = SkipWS(s, ve)
		if i >= len(s) {
			return i, errAt(i, "unexpected end of input inside an object")
		}
		switch s[i] {
		case ',':
			i = SkipWS(s, i+1)
		case '}':
			return i + 1, nil
		default:
			return i, errAt(i, "unexpected %s in an object, ',' or '}' was expected", describe(s, i))
		}
	}
}

// Begin finds the next element without reading it, for a caller that validates the element
// itself (and must then call Finish with its end); ok is false at the closing bracket.
func (a *Array) Begin() (start int, ok bool, err error) {
	s := a.s
	i := SkipWS(s, a.i)
	if i >= len(s) {
		return i, false, errAt(i, "unexpected end of input inside an array")
	}
	if s[i] == ']' {
		a.i, a.End = i+1, i+1
		return i, false, nil
	}
	if !a.first {
		if s[i] != ',' {
			return i, false, errAt(i, "unexpected %s in an array, ',' or ']' was expected", describe(s, i))
		}
		i = SkipWS(s, i+1)
	}
	a.first = false
	return i, true, nil
}

// Finish records the end of the element Begin returned.
func (a *Array) Finish(end int) { a.i = end }

// Rewind puts back the element Begin returned at start, unread: the next Begin returns it
// again. (The separator before it stays consumed.)
func (a *Array) Rewind(start int) { a.i, a.first = start, true }

// Resume continues a walk at start, the first byte of an element that follows a separator
// already checked (a chunk parsed elsewhere ended just before it).
func (a *Array) Resume(start int) { a.i, a.first = start, true }

// String returns the content of the validated JSON string raw, unescaping only when it has
// escapes (the common case is a zero-copy slice).
func String(raw string) string {
	if len(raw) < 2 || raw[0] != '"' {
		return ""
	}
	body := raw[1 : len(raw)-1]
	if strings.IndexByte(body, '\\') < 0 {
		return body
	}
	return gjson.Parse(raw).Str
}
