package words

import "testing"

func TestCount(t *testing.T) {
	for _, c := range []struct {
		n    int
		noun string
		want string
	}{
		{1, "rank", "1 rank"}, {0, "rank", "0 ranks"}, {2, "rank", "2 ranks"},
		{3, "process", "3 processes"}, {1, "process", "1 process"}, {12, "collective", "12 collectives"},
	} {
		if got := Count(c.n, c.noun); got != c.want {
			t.Errorf("Count(%d, %q) = %q, want %q", c.n, c.noun, got, c.want)
		}
	}
}

// Names with CR, LF, ESC or a right-to-left override print escaped; others unchanged.
func TestPrintable(t *testing.T) {
	for in, want := range map[string]string{
		"world":                        "world",
		"pp stage 2 \"a\"":             "pp stage 2 \"a\"",
		"x\nthe GPU of rank 0 stopped": `x\nthe GPU of rank 0 stopped`,
		"a\rb\x1b[31mc":                `a\rb\x1b[31mc`,
		"evil\u202egnp":                `evil\u202egnp`,
		"bad\xffutf8":                  `bad\xffutf8`,
		"日本":                           "日本",
		`back\slash`:                   `back\slash`, // clean: unchanged
	} {
		if got := Printable(in); got != want {
			t.Errorf("Printable(%q) = %q, want %q", in, got, want)
		}
	}
}
