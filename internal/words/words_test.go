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
