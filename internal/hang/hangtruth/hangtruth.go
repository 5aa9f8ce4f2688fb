// Package hangtruth reads the ground truth of the test host's hang scenarios (testhost/hang.c):
// what each rank's dump must show and the culprit planted, and writes from it the dumps the
// plugin would write, with the plugin's own writer. Tests and ncclmerge bench use it.
package hangtruth

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"github.com/ncclprof/ncclprof/internal/hang"
)

// Planted is a culprit the test host planted.
type Planted struct {
	Rank        int    `json:"rank"`
	Kind        string `json:"kind"`
	Comm        string `json:"comm"`
	CommName    string `json:"comm_name"`
	Seq         int64  `json:"seq"`
	Repeat      int64  `json:"repeat"`
	GraphReplay bool   `json:"graph_replay"`
	Func        string `json:"func"`
	Peer        *int   `json:"peer"`
	Channel     *int   `json:"channel"`
	Step        *int   `json:"step"`
	Differs     string `json:"differs"` // a mismatch: what the culprit called differently
}

// Truth is what one rank's dump must show (times as the host read them; the header's time
// fields left for the writer), with the planted culprits of the job and the ranks that
// completed the hung operation.
type Truth struct {
	Scenario string    `json:"scenario"`
	JobRank  int       `json:"job_rank"`
	HungNs   int64     `json:"hung_unix_ns"`
	Planted  []Planted `json:"planted"`
	Finished []struct {
		Comm string `json:"comm"`
		Rank int    `json:"rank"`
	} `json:"finished"`
	Dump    hang.Dump `json:"dump"`
	HasOpen bool      `json:"has_open"`
}

// Plan has the test host lay out every rank's truth of a scenario into dir (no plugin loaded)
// and reads them back, by job rank.
func Plan(host, dir string, args ...string) ([]Truth, error) {
	cmd := exec.Command(host, append(append([]string{"--plan", dir}, args...), "hang")...)
	if out, err := cmd.CombinedOutput(); err != nil {
		if strings.Contains(string(out), "usage: ncclprof-testhost --lib") {
			return nil, fmt.Errorf("%s has no hang scenario: rebuild it with make", host)
		}
		return nil, fmt.Errorf("%v: %v\n%s", cmd.Args, err, out)
	}
	paths, _ := filepath.Glob(filepath.Join(dir, "truth-*.json"))
	out := make([]Truth, len(paths))
	for _, p := range paths {
		tr, err := Read(p)
		if err != nil {
			return nil, err
		}
		if tr.JobRank < 0 || tr.JobRank >= len(out) {
			return nil, fmt.Errorf("%s: job rank %d of %d", p, tr.JobRank, len(out))
		}
		out[tr.JobRank] = tr
	}
	return out, nil
}

// Read reads one rank's truth.
func Read(path string) (Truth, error) {
	var tr Truth
	b, err := os.ReadFile(path)
	if err == nil {
		err = json.Unmarshal(b, &tr)
	}
	if err != nil {
		return tr, fmt.Errorf("%s: %w", path, err)
	}
	tr.Dump.Canonical() // in the order a dump is written, to compare with one
	return tr, nil
}

// Mode says which ranks write a dump.
type Mode int

const (
	// Watchdog: the ranks with an operation in flight (what NCCLPROF_HANG_TIMEOUT_S gives).
	Watchdog Mode = iota
	// Requested: every rank (ncclprof_dump_inflight() called on all of them).
	Requested
)

// WriteDumps writes each rank's dump as the plugin would, with hang.Write, 61 s after the hang
// (the default timeout and a second), into dir; skip names the job ranks whose dumps are lost.
// It returns the paths written, by job rank ("" where none).
func WriteDumps(dir string, truths []Truth, mode Mode, skip ...int) ([]string, error) {
	paths := make([]string, len(truths))
	for _, tr := range truths {
		if slices.Contains(skip, tr.JobRank) || mode == Watchdog && !tr.HasOpen {
			continue
		}
		d := tr.Dump
		d.PluginVersion = "synthesized"
		d.Reason, d.TimeoutS = hang.ReasonTimeout, 60
		if mode == Requested {
			d.Reason, d.TimeoutS = hang.ReasonRequest, 0
		}
		d.WrittenUnixNs = tr.HungNs + 61e9
		if tr.HasOpen {
			d.FirstDetectedUnixNs = tr.HungNs + 60e9
		}
		d.DumpsWritten = 1
		p, err := hang.Write(dir, &d)
		if err != nil {
			return nil, fmt.Errorf("job rank %d: %w", tr.JobRank, err)
		}
		paths[tr.JobRank] = p
	}
	return paths, nil
}
