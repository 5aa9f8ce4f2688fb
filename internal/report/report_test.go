package report

import (
	"bytes"
	"strings"
	"testing"

	"github.com/ncclprof/ncclprof/internal/commops"
	"github.com/ncclprof/ncclprof/internal/commops/commopstest"
	"github.com/ncclprof/ncclprof/internal/skew"
	"github.com/ncclprof/ncclprof/internal/stats"
	"github.com/ncclprof/ncclprof/internal/synth"
)

func render(t *testing.T, o synth.JobOptions) string {
	s, _ := commopstest.Job(t, o, commops.Options{})
	var b bytes.Buffer
	if err := Build(s, stats.Compute(s), skew.Analyze(s, skew.Defaults), "t <&> t").Write(&b); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// The page has its four plots with data, the slow rank, and nothing it would fetch.
func TestPage(t *testing.T) {
	h := render(t, synth.DefaultJob(4, 50))
	if n := strings.Count(h, "<svg"); n != 4 {
		t.Errorf("%d plots", n)
	}
	if strings.Count(h, "<circle") < 100 || strings.Contains(h, `class="empty"`) {
		t.Errorf("the scatter plots have too few markers")
	}
	for _, bad := range []string{"<script", "<link", "src=", "url(http"} {
		if strings.Contains(h, bad) {
			t.Errorf("the page has %q", bad)
		}
	}
	if !strings.Contains(h, "<title>t &lt;&amp;&gt; t</title>") {
		t.Error("the title is not escaped")
	}
	if !strings.Contains(h, `<tr class="slow"><td class="l">world</td><td>1</td>`) {
		t.Error("the slow rank 1 is not shown")
	}
}

// A job where nothing is matched across ranks says so in the plots instead of drawing nothing.
func TestEmptyPlotsSayWhy(t *testing.T) {
	o := synth.DefaultJob(2, 5)
	o.Only = []int{0}
	h := render(t, o)
	if !strings.Contains(h, "no collective seen on two ranks or more") {
		t.Error("the skew plot of a single rank does not say why it is empty")
	}
}
