// Package jsonscan validates and delimits JSON values in a document held in memory, without
// copying or recursion, and reports errors with their byte offset.
//
// The trace readers walk their files with gjson, which is fast and zero-copy but does not
// validate (it reads `{"a" 1}` or a bare word without complaint) and whose Valid recurses once
// per nesting level, so a hostile file of a million '[' exhausts the stack. ncclmerge copies
// input events into its output byte for byte, so every event must be valid JSON before it is
// copied: this package checks each value once, iteratively, with a depth limit, and says where
// it went wrong.
package jsonscan

import (
	"fmt"
	"math/bits"
	"strings"
	"unsafe"
)

// MaxDepth is the deepest nesting accepted. Real traces nest a few levels (args.occupancy is the
// deepest in Kineto output); the limit only exists so hostile input fails cleanly.
const MaxDepth = 512

// Error is a syntax error at a byte offset of the document.
type Error struct {
	Offset int64
	Msg    string
	// Field: the JSON is valid but a value is not what the format needs (a ts that is not a
	// number), as opposed to a syntax error.
	Field bool
}

func (e *Error) Error() string { return fmt.Sprintf("byte %d: %s", e.Offset, e.Msg) }

func errAt(i int, format string, a ...any) error {
	return &Error{Offset: int64(i), Msg: fmt.Sprintf(format, a...)}
}

// ws reports JSON whitespace.
func ws(c byte) bool { return c == ' ' || c == '\n' || c == '\r' || c == '\t' }

// SkipWS returns the index of the first non-whitespace byte at or after i.
func SkipWS(s string, i int) int {
	for i < len(s) && ws(s[i]) {
		i++
	}
	return i
}

// Skip validates the JSON value that starts at s[i] (leading whitespace allowed) and returns
// the index just past it.
func Skip(s string, i int) (int, error) {
	// stack holds one bit per open container: true for an object. A fixed array keeps the
	// common case allocation-free.
	var stackBuf [64]bool
	stack := stackBuf[:0]
	i = SkipWS(s, i)
	for {
		// A value is expected at i.
		if i >= len(s) {
			return i, errAt(i, "unexpected end of input, a value was expected")
		}
		var err error
		switch c := s[i]; {
		case c == '{' || c == '[':
			if len(stack) >= MaxDepth {
				return i, errAt(i, "nested deeper than %d levels", MaxDepth)
			}
			stack = append(stack, c == '{')
			i = SkipWS(s, i+1)
			closer := byte(']')
			if c == '{' {
				closer = '}'
			}
			if i < len(s) && s[i] == closer {
				stack = stack[:len(stack)-1]
				i++
				break
			}
			if c == '{' {
				if i, err = skipKey(s, i); err != nil {
					return i, err
				}
			}
			continue
		case c == '"':
			i, err = skipString(s, i)
		case c == '-' || (c >= '0' && c <= '9'):
			i, err = skipNumber(s, i)
		case c == 't':
			i, err = skipLiteral(s, i, "true")
		case c == 'f':
			i, err = skipLiteral(s, i, "false")
		case c == 'n':
			i, err = skipLiteral(s, i, "null")
		default:
			return i, errAt(i, "unexpected %s, a value was expected", describe(s, i))
		}
		if err != nil {
			return i, err
		}
		// A value ended: close containers or move to the next element.
		for {
			if len(stack) == 0 {
				return i, nil
			}
			i = SkipWS(s, i)
			if i >= len(s) {
				return i, errAt(i, "unexpected end of input inside %s", containerName(stack[len(stack)-1]))
			}
			obj := stack[len(stack)-1]
			switch {
			case s[i] == ',':
				i = SkipWS(s, i+1)
				if obj {
					if i, err = skipKey(s, i); err != nil {
						return i, err
					}
				}
			case (obj && s[i] == '}') || (!obj && s[i] == ']'):
				stack = stack[:len(stack)-1]
				i++
				continue
			default:
				return i, errAt(i, "unexpected %s in %s, ',' or '%s' was expected", describe(s, i),
					containerName(obj), map[bool]string{true: "}", false: "]"}[obj])
			}
			break
		}
	}
}

func containerName(obj bool) string {
	if obj {
		return "an object"
	}
	return "an array"
}

// skipKey validates `"key" :` at i and returns the index of the value after the colon.
func skipKey(s string, i int) (int, error) {
	v, _, err := skipKeyEnd(s, i)
	return v, err
}

// skipKeyEnd is skipKey that also returns the index of the key's closing quote.
func skipKeyEnd(s string, i int) (v, keyEnd int, err error) {
	if i >= len(s) || s[i] != '"' {
		if i >= len(s) {
			return i, i, errAt(i, "unexpected end of input, an object key was expected")
		}
		return i, i, errAt(i, "unexpected %s, an object key (a quoted string) was expected", describe(s, i))
	}
	i, err = skipString(s, i)
	if err != nil {
		return i, i, err
	}
	keyEnd = i - 1
	i = SkipWS(s, i)
	if i >= len(s) || s[i] != ':' {
		if i >= len(s) {
			return i, keyEnd, errAt(i, "unexpected end of input, ':' was expected")
		}
		return i, keyEnd, errAt(i, "unexpected %s, ':' was expected after an object key", describe(s, i))
	}
	return SkipWS(s, i+1), keyEnd, nil
}

// strStop marks the bytes a string scan must look at: the quote, the backslash and the control
// characters JSON forbids inside strings.
var strStop = func() (t [256]bool) {
	for c := 0; c < 0x20; c++ {
		t[c] = true
	}
	t['"'], t['\\'] = true, true
	return t
}()

// skipString validates the string whose opening quote is at s[i].
func skipString(s string, i int) (int, error) {
	end, _, err := ScanString(s, i)
	return end, err
}

// ScanString validates the string whose opening quote is at s[i] and returns the index just
// past it, and whether it is plain (holds no escape: its content is s[i+1:end-1] as it is).
func ScanString(s string, i int) (end int, plain bool, err error) {
	start := i
	plain = true
	i++
	for {
		// Eight bytes at a time: find the first quote, backslash or control character.
		for i+8 <= len(s) {
			m := stopMask(load8(s, i))
			if m != 0 {
				i += bits.TrailingZeros64(m) >> 3
				break
			}
			i += 8
		}
		for i < len(s) && !strStop[s[i]] {
			i++
		}
		if i >= len(s) {
			return len(s), false, errAt(start, "unterminated string")
		}
		switch c := s[i]; {
		case c == '"':
			return i + 1, plain, nil
		case c == '\\':
			plain = false
			j := i + 1
			if j >= len(s) {
				return j, false, errAt(start, "unterminated string")
			}
			switch s[j] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i = j + 1
			case 'u':
				if j+5 > len(s) || !isHex4(s[j+1:j+5]) {
					return j, false, errAt(i, "invalid \\u escape")
				}
				i = j + 5
			default:
				return j, false, errAt(i, "invalid escape \\%c", s[j])
			}
		default:
			return i, false, errAt(i, "control character 0x%02x inside a string", c)
		}
	}
}

const (
	ones  = 0x0101010101010101
	highs = 0x8080808080808080
)

// load8 reads s[i:i+8] as a little-endian word (the caller checks the bounds).
func load8(s string, i int) uint64 {
	p := unsafe.Add(unsafe.Pointer(unsafe.StringData(s)), i)
	b := (*[8]byte)(p)
	return uint64(b[0]) | uint64(b[1])<<8 | uint64(b[2])<<16 | uint64(b[3])<<24 |
		uint64(b[4])<<32 | uint64(b[5])<<40 | uint64(b[6])<<48 | uint64(b[7])<<56
}

// stopMask has the high bit set in the lowest byte of x that is '"', '\\' or below 0x20 (bytes
// above the lowest flagged one may be flagged falsely; only the lowest is used).
func stopMask(x uint64) uint64 {
	q := x ^ (ones * '"')
	b := x ^ (ones * '\\')
	return ((x-ones*0x20)&^x | (q-ones)&^q | (b-ones)&^b) & highs
}

func isHex4(s string) bool {
	for k := 0; k < 4; k++ {
		c := s[k]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F') {
			return false
		}
	}
	return true
}

// skipNumber validates -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)? at s[i].
func skipNumber(s string, i int) (int, error) {
	start := i
	if s[i] == '-' {
		i++
	}
	switch {
	case i < len(s) && s[i] == '0':
		i++
	case i < len(s) && s[i] >= '1' && s[i] <= '9':
		i = skipDigits(s, i+1)
	default:
		return i, numberErr(s, start, i, "invalid number")
	}
	if i < len(s) && s[i] == '.' {
		j := skipDigits(s, i+1)
		if j == i+1 {
			return j, numberErr(s, start, j, "invalid number: digits must follow '.'")
		}
		i = j
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			i++
		}
		j := skipDigits(s, i)
		if j == i {
			return j, numberErr(s, start, j, "invalid number: digits must follow the exponent")
		}
		i = j
	}
	return i, nil
}

// numberErr reports a bad number at its start, or at the end of the document when the document
// ends inside it ("1234." of a file cut while written), so that a reader accepting cut files
// sees the cut.
func numberErr(s string, start, at int, msg string) error {
	if at >= len(s) {
		return errAt(at, "%s", msg)
	}
	return errAt(start, "%s", msg)
}

func skipDigits(s string, i int) int {
	for i < len(s) && s[i]-'0' <= 9 {
		i++
	}
	return i
}

// SkipScalar is Skip for a value that starts at s[i] without leading whitespace, with the
// common scalars (strings, numbers) validated directly.
func SkipScalar(s string, i int) (int, error) {
	if i < len(s) {
		switch c := s[i]; {
		case c == '"':
			return skipString(s, i)
		case c == '-' || c-'0' <= 9:
			return skipNumber(s, i)
		}
	}
	return Skip(s, i)
}

func skipLiteral(s string, i int, lit string) (int, error) {
	if !strings.HasPrefix(s[i:], lit) {
		return i, errAt(i, "unexpected %s, a value was expected", describe(s, i))
	}
	return i + len(lit), nil
}

// describe names the byte at s[i] for an error message.
func describe(s string, i int) string {
	if i >= len(s) {
		return "end of input"
	}
	c := s[i]
	if c >= 0x20 && c < 0x7f {
		return fmt.Sprintf("'%c'", c)
	}
	return fmt.Sprintf("byte 0x%02x", c)
}

// LineCol converts a byte offset into a 1-based line and column, for messages about small
// files; large files are reported by offset alone.
func LineCol(s string, off int) (line, col int) {
	if off > len(s) {
		off = len(s)
	}
	line = 1 + strings.Count(s[:off], "\n")
	col = off - strings.LastIndexByte(s[:off], '\n')
	return line, col
}

// SkipNumber validates the number that starts at s[i] and returns the index just past it.
func SkipNumber(s string, i int) (int, error) { return skipNumber(s, i) }
