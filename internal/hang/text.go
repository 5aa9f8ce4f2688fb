package hang

import (
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"time"

	"github.com/ncclprof/ncclprof/internal/words"
)

// maxProblems is how many unusable files the text names.
const maxProblems = 5

// Formats Write knows.
var Formats = []string{"text", "json"}

// Write prints the result: text (the verdict first, then the evidence per hung operation, ranks
// in the same situation on one line) or json (the Result).
func (r *Result) Write(w io.Writer, format string) error {
	if format == "json" {
		enc := json.NewEncoder(w)
		enc.SetIndent("", " ")
		enc.SetEscapeHTML(false)
		return enc.Encode(r)
	}
	var b strings.Builder
	b.WriteString(r.Verdict + "\n")
	for _, hg := range r.Hangs {
		b.WriteString("\n" + hg.Title() + "\n")
		width := 0
		for _, g := range hg.Groups {
			width = max(width, min(len(g.Label()), 30))
		}
		for _, g := range hg.Groups {
			label := g.Label()
			if len(label) > width {
				fmt.Fprintf(&b, "  %s\n  %-*s  %-17s %s\n", label, width, "", g.State, g.Text)
				continue
			}
			fmt.Fprintf(&b, "  %-*s  %-17s %s\n", width, label, g.State, g.Text)
		}
	}
	b.WriteString("\n" + r.Dumps.Text() + "\n")
	for i, p := range r.Dumps.Problems {
		if i == maxProblems && len(r.Dumps.Problems) > maxProblems+1 {
			fmt.Fprintf(&b, "  … and %d more (--format json lists them all)\n", len(r.Dumps.Problems)-i)
			break
		}
		fmt.Fprintf(&b, "  %s: %s\n", words.Printable(filepath.Base(p.Path)), words.Printable(p.Msg))
	}
	for _, n := range r.Notes {
		b.WriteString("note: " + n + "\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// Title heads a hung operation's evidence.
func (hg *Hung) Title() string {
	name := ""
	if hg.CommName != "" {
		name = " (" + hg.CommName + ")"
	}
	what := hg.Func + " seq " + hg.SeqText()
	if hg.Kind == KindP2p {
		what = "point-to-point operations"
	}
	return fmt.Sprintf("%s on comm %s%s, %d ranks: %d have it open, the longest for %s", what, hg.Comm, name, hg.NRanks, hg.In, seconds(hg.StuckForNs))
}

// Label is the group's ranks as printed: "rank 5" or "ranks 0-4,6-255 (255)".
func (g *Group) Label() string {
	if g.Count == 1 {
		return "rank " + g.Ranks
	}
	return fmt.Sprintf("ranks %s (%d)", g.Ranks, g.Count)
}

// Text says what was read.
func (d *DumpsRead) Text() string {
	s := fmt.Sprintf("%s read", plural(d.Read, "dump"))
	if d.Read > 0 {
		s += fmt.Sprintf(", written %s to %s", clock(d.FirstWritten), clock(d.LastWritten))
		if d.Requested > 0 {
			s += fmt.Sprintf(", %d on request", d.Requested)
		}
		if d.NothingInFlight > 0 {
			s += fmt.Sprintf(", %d with nothing in flight", d.NothingInFlight)
		}
		if d.Simulated > 0 {
			s += fmt.Sprintf(", %d SIMULATED (the test host's, not a real job's)", d.Simulated)
		}
	}
	if d.Summaries+d.Traces > 0 {
		s += fmt.Sprintf("; %s and %s beside them", plural(d.Summaries, "summary"), plural(d.Traces, "trace"))
	}
	if len(d.Problems) > 0 {
		s += fmt.Sprintf("; %s could not be used:", plural(len(d.Problems), "file"))
	}
	return s
}

func clock(ns int64) string { return time.Unix(0, ns).UTC().Format("2006-01-02 15:04:05 UTC") }
