// Package words writes counts for people: "1 rank", "2 ranks", "0 collectives"; and names that
// come from inputs so that they print as what they are.
package words

import (
	"strconv"
	"strings"
	"unicode"
)

// Printable escapes what a terminal would act on rather than show — control characters (CR, LF,
// ESC...), invalid UTF-8 and the invisible formatting characters that reorder or hide text — as
// Go escapes (\r, \n, \x1b, \u202e), so that a name chosen by an application (a communicator's)
// cannot start a line of its own, rewrite one or recolour the terminal in a text output.
func Printable(s string) string {
	clean := true
	for _, r := range s {
		if unsafeRune(r) {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	q := strconv.QuoteToGraphic(s)
	return strings.ReplaceAll(q[1:len(q)-1], `\"`, `"`)
}

func unsafeRune(r rune) bool {
	return r == unicode.ReplacementChar || unicode.IsControl(r) || unicode.Is(unicode.Cf, r) || r == '\u2028' || r == '\u2029'
}

// Count is n and the noun, plural unless n is 1: Count(1, "rank") = "1 rank", Count(3, "process")
// = "3 processes".
func Count(n int, noun string) string {
	return strconv.Itoa(n) + " " + Noun(n, noun)
}

// Noun is the noun as it goes after n.
func Noun(n int, noun string) string {
	if n == 1 || n == -1 {
		return noun
	}
	for _, end := range []string{"s", "x", "sh", "ch"} {
		if strings.HasSuffix(noun, end) {
			return noun + "es"
		}
	}
	return noun + "s"
}

// Ns writes a duration in ns for people: "2.50 ms" from 10 ms up, "12.3 µs" from 10 µs up,
// "950 ns" below.
func Ns(ns int64) string {
	a := max(ns, -ns)
	switch {
	case a >= 10_000_000:
		return strconv.FormatFloat(float64(ns)/1e6, 'f', 2, 64) + " ms"
	case a >= 10_000:
		return strconv.FormatFloat(float64(ns)/1e3, 'f', 1, 64) + " µs"
	}
	return strconv.FormatInt(ns, 10) + " ns"
}
