// Package hangtest runs the test host's hang scenarios for tests and checks verdicts against
// the planted culprits.
package hangtest

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/ncclprof/ncclprof/internal/hang"
	"github.com/ncclprof/ncclprof/internal/hang/hangtruth"
	"github.com/ncclprof/ncclprof/internal/hosttest"
)

// Built is a file of the repository's build directory, which must exist.
func Built(t testing.TB, name string) string {
	p := hosttest.Path(t, name)
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("%s is not built: run make in the repository root (%v)", p, err)
	}
	return p
}

// Plan lays out every rank's truth of a scenario (testhost --plan).
func Plan(t testing.TB, args ...string) []hangtruth.Truth {
	truths, err := hangtruth.Plan(Built(t, "ncclprof-testhost"), t.TempDir(), args...)
	if err != nil {
		t.Fatal(err)
	}
	return truths
}

// Synthesize writes the dumps the plugin would write into a new directory (see
// hangtruth.WriteDumps) and returns it with the paths, by job rank.
func Synthesize(t testing.TB, truths []hangtruth.Truth, mode hangtruth.Mode, skip ...int) (string, []string) {
	dir := t.TempDir()
	paths, err := hangtruth.WriteDumps(dir, truths, mode, skip...)
	if err != nil {
		t.Fatal(err)
	}
	return dir, paths
}

// Suspect is a suspect's identity: what a verdict must get exactly right.
type Suspect struct {
	Rank    int
	Kind    string
	Comm    string
	Seq     int64
	Repeat  int64
	Replay  bool
	Func    string
	Peer    int    // -1: none
	Channel int    // -1: none
	Differs string // a mismatch: what differs ("count", "count and datatype"...)
}

func (s Suspect) String() string {
	return fmt.Sprintf("%s rank %d %s seq %d+%d replay %v comm %s peer %d channel %d differs %q", s.Kind, s.Rank, s.Func, s.Seq, s.Repeat, s.Replay, s.Comm, s.Peer, s.Channel, s.Differs)
}

// Want is the planted culprits as suspects.
func Want(truths []hangtruth.Truth) []Suspect {
	var out []Suspect
	for _, p := range truths[0].Planted {
		s := Suspect{Rank: p.Rank, Kind: p.Kind, Comm: p.Comm, Seq: p.Seq, Repeat: p.Repeat, Replay: p.GraphReplay, Func: p.Func, Peer: -1, Channel: -1, Differs: p.Differs}
		if p.Peer != nil {
			s.Peer, s.Channel = *p.Peer, *p.Channel
		}
		out = append(out, s)
	}
	return sorted(out)
}

// Got is the result's suspects.
func Got(res *hang.Result) []Suspect {
	var out []Suspect
	for _, s := range res.Suspects {
		g := Suspect{Rank: s.Rank, Kind: s.Kind, Comm: s.Comm, Seq: s.Seq, Repeat: s.Repeat, Replay: s.GraphReplay, Func: s.Func, Peer: -1, Channel: -1}
		if s.Peer != nil {
			g.Peer = *s.Peer
		}
		if s.Channel != nil {
			g.Channel = *s.Channel
		}
		if s.Mismatch != nil {
			g.Differs = strings.Join(s.Mismatch.Differs, " and ")
		}
		out = append(out, g)
	}
	return sorted(out)
}

func sorted(s []Suspect) []Suspect {
	slices.SortFunc(s, func(a, b Suspect) int { return strings.Compare(a.String(), b.String()) })
	return s
}

// AssertPlanted fails unless the result names exactly the planted culprits.
func AssertPlanted(t testing.TB, res *hang.Result, truths []hangtruth.Truth) {
	t.Helper()
	if want, got := Want(truths), Got(res); !slices.Equal(want, got) {
		t.Errorf("suspects:\n got  %v\n want %v\nverdict:\n%s", got, want, res.Verdict)
	}
}
