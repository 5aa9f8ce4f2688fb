package jsonscan

import (
	"errors"
	"math"
	"strconv"
)

// ErrRange is returned for a number that does not fit the result.
var ErrRange = errors.New("number out of range")

// ErrSyntax is returned for text that is not a JSON number (or a numeric string's content).
var ErrSyntax = errors.New("not a number")

const maxScale = 9

// Scaled returns the JSON number in raw multiplied by 10^scale (0 ≤ scale ≤ 9), exactly, as an
// int64, rounding half away from zero. Trace timestamps are microseconds with up to three
// decimals; a float64 holds absolute Unix µs only to 0.25 µs, so they are parsed as decimal
// text: Scaled("4458677009853.422", 3) = 4458677009853422 ns.
func Scaled(raw string, scale int) (int64, error) {
	if scale < 0 || scale > maxScale {
		return 0, ErrRange
	}
	if v, ok := scaledFast(raw, scale); ok {
		return v, nil
	}
	i := 0
	neg := false
	if i < len(raw) && (raw[i] == '-' || raw[i] == '+') {
		neg = raw[i] == '-'
		i++
	}
	is := i
	for i < len(raw) && raw[i] >= '0' && raw[i] <= '9' {
		i++
	}
	intPart := raw[is:i]
	fracPart := ""
	if i < len(raw) && raw[i] == '.' {
		i++
		fs := i
		for i < len(raw) && raw[i] >= '0' && raw[i] <= '9' {
			i++
		}
		fracPart = raw[fs:i]
		if fracPart == "" {
			return 0, ErrSyntax
		}
	}
	if intPart == "" && fracPart == "" {
		return 0, ErrSyntax
	}
	exp := 0
	if i < len(raw) && (raw[i] == 'e' || raw[i] == 'E') {
		i++
		eneg := false
		if i < len(raw) && (raw[i] == '+' || raw[i] == '-') {
			eneg = raw[i] == '-'
			i++
		}
		es := i
		for i < len(raw) && raw[i] >= '0' && raw[i] <= '9' {
			if exp < 1000000 {
				exp = exp*10 + int(raw[i]-'0')
			}
			i++
		}
		if i == es {
			return 0, ErrSyntax
		}
		if eneg {
			exp = -exp
		}
	}
	if i != len(raw) {
		return 0, ErrSyntax
	}
	// The value is 0.d1d2d3… × 10^point once leading zeros are gone.
	digit := func(k int) byte { // k-th significant digit, over int then frac parts
		if k < len(intPart) {
			return intPart[k]
		}
		return fracPart[k-len(intPart)]
	}
	n := len(intPart) + len(fracPart)
	first := 0
	for first < n && digit(first) == '0' {
		first++
	}
	if first == n {
		return 0, nil
	}
	point := len(intPart) - first + exp + scale
	if point > 19 {
		return 0, ErrRange
	}
	var mant uint64
	for k := 0; k < point; k++ {
		d := byte('0')
		if first+k < n {
			d = digit(first + k)
		}
		mant = mant*10 + uint64(d-'0')
	}
	// Round half away from zero on the first dropped digit.
	if r := first + point; point >= 0 && r < n && digit(r) >= '5' {
		mant++
	}
	if mant > math.MaxInt64 {
		return 0, ErrRange
	}
	v := int64(mant)
	if neg {
		v = -v
	}
	return v, nil
}

// scaledFast handles the forms traces use almost always — digits, optionally a point and at
// most scale digits, at most 19 digits once scaled — without the general path's bookkeeping.
// Absolute Unix µs (PyTorch ≤ 2.3: 16 digits, 19 in ns) are among them: sent to the general
// path, they made it a tenth of a merge of such a trace.
func scaledFast(raw string, scale int) (int64, bool) {
	i, neg := 0, false
	if len(raw) > 0 && raw[0] == '-' {
		neg, i = true, 1
	}
	if len(raw)-i == 0 || len(raw)-i > 20 {
		return 0, false
	}
	var v uint64 // wraps only past 19 digits, which are sent to the general path below
	frac := -1   // digits after the point, -1 before it
	nd := 0
	for ; i < len(raw); i++ {
		c := raw[i]
		switch {
		case c-'0' <= 9:
			v = v*10 + uint64(c-'0')
			nd++
			if frac >= 0 {
				frac++
			}
		case c == '.' && frac < 0:
			frac = 0
		default:
			return 0, false
		}
	}
	if frac == 0 || frac > scale {
		return 0, false // "1." is not a number; more decimals need rounding: general path
	}
	if frac < 0 {
		frac = 0
	}
	if nd+scale-frac > 19 {
		return 0, false // might not fit: the general path checks
	}
	for ; frac < scale; frac++ {
		v *= 10
	}
	if v > math.MaxInt64 {
		return 0, false // out of range (or exactly -2^63): the general path says which
	}
	if neg {
		return -int64(v), true
	}
	return int64(v), true
}

// Uint parses a JSON number that must be a non-negative integer up to 2^64−1 (Kineto's
// `Comms Id` exceeds int64), also accepting it quoted or written as 0x hex.
func Uint(raw string) (uint64, error) {
	raw = unquote(raw)
	if len(raw) > 2 && raw[0] == '0' && (raw[1] == 'x' || raw[1] == 'X') {
		return strconv.ParseUint(raw[2:], 16, 64)
	}
	if v, err := strconv.ParseUint(raw, 10, 64); err == nil {
		return v, nil
	}
	// 1.0 or 1e3 forms: only when exact.
	v, err := exactInt(raw)
	if err != nil {
		return 0, err
	}
	if v < 0 {
		return 0, ErrRange
	}
	return uint64(v), nil
}

// Int parses a JSON number (possibly quoted) as an int64, accepting integral float text.
func Int(raw string) (int64, error) {
	raw = unquote(raw)
	if v, err := strconv.ParseInt(raw, 10, 64); err == nil {
		return v, nil
	}
	return exactInt(raw)
}

// exactInt accepts integral numbers written as 2.0 or 2e3, and rejects 2.5.
func exactInt(raw string) (int64, error) {
	v, err := Scaled(raw, 0)
	if err != nil {
		return 0, err
	}
	if v10, err := Scaled(raw, 1); err == nil && v10 != v*10 {
		return 0, ErrSyntax
	}
	return v, nil
}

func unquote(raw string) string {
	if len(raw) >= 2 && raw[0] == '"' && raw[len(raw)-1] == '"' {
		return raw[1 : len(raw)-1]
	}
	return raw
}

// AppendMicros appends ns as microseconds with exactly three decimals, the way Kineto writes
// ts and dur since PyTorch 2.4 ("4458677009853.422").
func AppendMicros(b []byte, ns int64) []byte {
	if ns < 0 {
		b = append(b, '-')
		if ns == math.MinInt64 {
			return append(b, "9223372036854775.808"...)
		}
		ns = -ns
	}
	b = strconv.AppendInt(b, ns/1000, 10)
	f := ns % 1000
	return append(b, '.', byte('0'+f/100), byte('0'+f/10%10), byte('0'+f%10))
}
