// Package words writes counts for people: "1 rank", "2 ranks", "0 collectives".
package words

import (
	"strconv"
	"strings"
)

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
