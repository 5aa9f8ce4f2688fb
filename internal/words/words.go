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
