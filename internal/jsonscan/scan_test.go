package jsonscan

import (
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"
)

// validAll reports whether s is one JSON value with only whitespace around it.
func validAll(s string) bool {
	end, err := Skip(s, 0)
	return err == nil && SkipWS(s, end) == len(s)
}

func TestSkipAgreesWithEncodingJSON(t *testing.T) {
	cases := []string{
		`{}`, `[]`, `{"a":1}`, `[1,2,3]`, `"x"`, `-0.5e-3`, `true`, `null`, `false`,
		`{"a":[{"b":"c\"d\\e\u00e9"}],"f":-1.25E+2}`, ` {"a" : [ ] } `,
		`{"a":1,}`, `[1,]`, `{"a" 1}`, `{a:1}`, `[01]`, `[1.]`, `[.5]`, `[1e]`, `"\x"`, "\"a\tb\"",
		`"\u12"`, `[`, `{"a":`, `tru`, `nul`, `[1 2]`, `{"a":1 "b":2}`, `"unterminated`, `{"a":1}}`,
		`["` + strings.Repeat("long string without escapes ", 20) + `"]`,
		`["` + strings.Repeat("x", 100) + `\"` + strings.Repeat("y", 100) + `"]`,
		"[\"" + strings.Repeat("z", 60) + "\x01\"]",
	}
	for _, c := range cases {
		if got, want := validAll(c), json.Valid([]byte(c)); got != want {
			t.Errorf("%q: jsonscan says %v, encoding/json %v", c, got, want)
		}
	}
}

func TestDepthLimit(t *testing.T) {
	ok := strings.Repeat("[", MaxDepth) + strings.Repeat("]", MaxDepth)
	if !validAll(ok) {
		t.Errorf("depth %d rejected", MaxDepth)
	}
	deep := strings.Repeat("[", 1_000_000)
	_, err := Skip(deep, 0)
	var se *Error
	if !errors.As(err, &se) || se.Offset != MaxDepth || !strings.Contains(se.Msg, "deeper") {
		t.Fatalf("want a depth error at %d, got %v", MaxDepth, err)
	}
}

func TestErrorOffsets(t *testing.T) {
	cases := map[string]int64{
		`{"a":1 "b":2}`: 7,
		`[1,2,x]`:       5,
		`{"a":"b\q"}`:   7,
		`[1,2`:          4,
		"[\"ab\x02\"]":  4,
	}
	for doc, off := range cases {
		_, err := Skip(doc, 0)
		var se *Error
		if !errors.As(err, &se) || se.Offset != off {
			t.Errorf("%q: want error at %d, got %v", doc, off, err)
		}
	}
}

func TestArrayWalk(t *testing.T) {
	doc := ` [ {"a":1} , [2], "three" ] `
	a, err := NewArray(doc, 0)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for {
		s, e, ok, err := a.Next()
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			break
		}
		got = append(got, doc[s:e])
	}
	if strings.Join(got, "|") != `{"a":1}|[2]|"three"` || a.End != len(doc)-1 {
		t.Fatalf("got %q end %d", got, a.End)
	}
}

func TestMembers(t *testing.T) {
	doc := `{"ph":"X", "args":{"x":[1,2]}, "k\"q":null}`
	var keys, vals []string
	end, err := Members(doc, 0, func(k string, v int) (int, error) {
		e, err := Skip(doc, v)
		keys, vals = append(keys, k), append(vals, doc[v:e])
		return e, err
	})
	if err != nil || end != len(doc) {
		t.Fatal(err, end)
	}
	if strings.Join(keys, ",") != `ph,args,k\"q` || strings.Join(vals, ",") != `"X",{"x":[1,2]},null` {
		t.Fatalf("keys %q vals %q", keys, vals)
	}
}

func TestScaled(t *testing.T) {
	cases := []struct {
		in   string
		want int64
		err  bool
	}{
		{"4458677009853.422", 4458677009853422, false},
		{"1683564902174220", 1683564902174220000, false},
		{"13.0", 13000, false},
		{"1712195495406752.8", 1712195495406752800, false},
		{"0.0005", 1, false}, // rounds half away from zero
		{"0.0004", 0, false},
		{"-2.5", -2500, false},
		{"1.5e3", 1500000, false},
		{"1.716423323009853e15", 1716423323009853000, false},
		{"0", 0, false},
		{"9223372036854775.807", 9223372036854775807, false},
		{"9223372036854775.808", 0, true},
		{"1e400", 0, true},
		{"1e-400", 0, false},
		{"", 0, true}, {"abc", 0, true}, {"1.", 0, true}, {"1e", 0, true}, {"--1", 0, true},
	}
	for _, c := range cases {
		got, err := Scaled(c.in, 3)
		if (err != nil) != c.err || (!c.err && got != c.want) {
			t.Errorf("Scaled(%q) = %d, %v; want %d, err %v", c.in, got, err, c.want, c.err)
		}
	}
}

func TestUint(t *testing.T) {
	for in, want := range map[string]uint64{
		"10159970886766084423": 10159970886766084423, `"18446744073709551615"`: 18446744073709551615,
		"0x1f": 31, "1e3": 1000, "7": 7,
	} {
		if got, err := Uint(in); err != nil || got != want {
			t.Errorf("Uint(%s) = %d, %v", in, got, err)
		}
	}
	for _, in := range []string{"-1", "18446744073709551616", "1.5", "x"} {
		if _, err := Uint(in); err == nil {
			t.Errorf("Uint(%s) accepted", in)
		}
	}
}

func TestAppendMicros(t *testing.T) {
	for ns, want := range map[int64]string{4458677009853422: "4458677009853.422", 5: "0.005", -1500: "-1.500", 0: "0.000"} {
		if got := string(AppendMicros(nil, ns)); got != want {
			t.Errorf("%d: %s, want %s", ns, got, want)
		}
	}
}

// FuzzSkip checks the validator against encoding/json on arbitrary input: they agree on
// validity (within the depth limit) and the validator never panics.
func FuzzSkip(f *testing.F) {
	for _, s := range []string{`{"traceEvents":[{"ph":"X","ts":1.5,"args":{"a":[1,{"b":null}]}}]}`,
		`[1,"\u00e9\n",-0.0e+1,true]`, `{"a":"\q"}`, `[[[[`, `"` + "\x7f\xff" + `"`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got := validAll(s)
		if strings.Count(s, "[")+strings.Count(s, "{") > MaxDepth {
			return // may be rejected for depth alone
		}
		if want := json.Valid([]byte(s)); got != want {
			t.Fatalf("%q: jsonscan %v, encoding/json %v", s, got, want)
		}
	})
}

// FuzzScaled checks exact decimal scaling against a float on values where a float is exact.
func FuzzScaled(f *testing.F) {
	f.Add(int64(4458677009853), uint16(422))
	f.Fuzz(func(t *testing.T, whole int64, frac uint16) {
		if whole < 0 || whole > 1<<50 {
			return
		}
		frac %= 1000
		in := strings.TrimRight(strings.TrimRight(
			string(AppendMicros(nil, whole*1000+int64(frac))), "0"), ".")
		got, err := Scaled(in, 3)
		if err != nil || got != whole*1000+int64(frac) {
			t.Fatalf("Scaled(%q) = %d, %v; want %d", in, got, err, whole*1000+int64(frac))
		}
	})
}

// The fast path and the general path agree, and neither overflows silently.
func TestScaledFastPathEdges(t *testing.T) {
	for _, in := range []string{"999999999999999999", "9223372036854775807", "1.2345", "-0.001", "123.4", "0.5", "00012.000"} {
		fast, ok := scaledFast(in, 3)
		if !ok {
			continue
		}
		if slow, err := Scaled(in+"e0", 3); err != nil || slow != fast {
			t.Errorf("%s: fast %d, general %d %v", in, fast, slow, err)
		}
	}
	if _, err := Scaled("999999999999999999", 3); err != ErrRange {
		t.Errorf("18 nines × 1000 must overflow int64: %v", err)
	}
}

// Absolute Unix µs as PyTorch ≤ 2.3 writes them (16 digits, 19 once in ns) take the fast path,
// with the general path's value, up to the last that fits an int64; beyond, the general path
// says it does not fit.
func TestScaledFastAbsoluteMicros(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int64
	}{
		{"1711964647000000", 1711964647000000000},
		{"-1711964647000000", -1711964647000000000},
		{"1711964647000000.5", 1711964647000000500},
		{"9223372036854775", 9223372036854775000},
		{"9223372036854775.807", math.MaxInt64},
		{"922337203685477.5807", 0}, // four decimals: rounding, general path
	} {
		fast, ok := scaledFast(c.in, 3)
		slow, err := Scaled(c.in+"e0", 3)
		if c.want == 0 {
			if ok {
				t.Errorf("%s: fast path took a value it must round", c.in)
			}
			continue
		}
		if !ok || fast != c.want || err != nil || slow != c.want {
			t.Errorf("%s: fast %d (%v), general %d (%v); want %d", c.in, fast, ok, slow, err, c.want)
		}
	}
	for _, in := range []string{"9223372036854776", "9223372036854775.808", "9999999999999999.999", "-9223372036854775.808"} {
		if v, ok := scaledFast(in, 3); ok {
			t.Errorf("%s: fast path gave %d for a value beyond int64", in, v)
		}
		if _, err := Scaled(in, 3); err != ErrRange {
			t.Errorf("Scaled(%s): %v, want ErrRange", in, err)
		}
	}
}

// FuzzScaledFastPath holds the fast path to the general one on any text it accepts.
func FuzzScaledFastPath(f *testing.F) {
	for _, s := range []string{"1711964647000000", "9223372036854775.807", "-0.001", "00012.000", "9999999999999999999"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		fast, ok := scaledFast(in, 3)
		if !ok {
			return
		}
		if slow, err := Scaled(in+"e0", 3); err != nil || slow != fast {
			t.Fatalf("%q: fast %d, general %d %v", in, fast, slow, err)
		}
	})
}

// BenchmarkScaledAbsoluteMicros: a PyTorch ≤ 2.3 ts, as every event of such a trace has one.
func BenchmarkScaledAbsoluteMicros(b *testing.B) {
	for i := 0; i < b.N; i++ {
		if _, err := Scaled("1711964647000123", 3); err != nil {
			b.Fatal(err)
		}
	}
}
