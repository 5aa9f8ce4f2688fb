package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/ncclprof/ncclprof/internal/hang"
	"github.com/ncclprof/ncclprof/internal/hang/hangtest"
	"github.com/ncclprof/ncclprof/internal/hang/hangtruth"
)

// ncclmerge hang end to end on dumps synthesized from a planted link failure: the verdict is the
// first line, the JSON names the pair and the channel, the exit status is 0.
func TestHangCommand(t *testing.T) {
	truths := hangtest.Plan(t, "--scenario", "link", "--culprit", "2", "--channel", "1", "--step", "3")
	dir, _ := hangtest.Synthesize(t, truths, hangtruth.Watchdog)
	out, err := run(t, "hang", dir)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if !strings.HasPrefix(out, "the link from rank 2 (node000, pid 40002) to rank 3 (node000, pid 40003) stopped on channel 1 in AllReduce seq 2398459 on comm 0x48a6000000000003 (world)") {
		t.Errorf("the first line is not the verdict:\n%s", out)
	}
	out, err = run(t, "hang", "--format", "json", dir)
	if err != nil {
		t.Fatal(err)
	}
	var res struct {
		Suspects []map[string]any `json:"suspects"`
		Hangs    []struct {
			Ranks []struct {
				Rank  int    `json:"rank"`
				State string `json:"state"`
			} `json:"ranks"`
		} `json:"hangs"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"rank": 2.0, "kind": "link", "comm": "0x48a6000000000003", "seq": 2398459.0, "func": "AllReduce", "peer": 3.0, "channel": 1.0}
	if len(res.Suspects) != 1 {
		t.Fatalf("%d suspects", len(res.Suspects))
	}
	for k, v := range want {
		if res.Suspects[0][k] != v {
			t.Errorf("suspect %s = %v, want %v", k, res.Suspects[0][k], v)
		}
	}
	if n := len(res.Hangs[0].Ranks); n != 8 || res.Hangs[0].Ranks[3].State != hang.StateLinkRecv {
		t.Errorf("per-rank evidence: %d ranks, rank 3 %+v", n, res.Hangs[0].Ranks[3])
	}
}

// The exit status says what was found: 3 when nothing is in flight, 2 when the dumps name nobody,
// 1 (an error that says what to do) when there is no dump.
func TestHangExitStatus(t *testing.T) {
	truths := hangtest.Plan(t, "--scenario", "link", "--culprit", "2")
	dir, _ := hangtest.Synthesize(t, truths, hangtruth.Requested)
	for _, p := range []string{"0", "1", "2", "3", "4", "5", "6", "7"} {
		d, err := hang.ReadFile(filepath.Join(dir, fmt.Sprintf("ncclprof-hang-node000-4000%s.json", p)))
		if err != nil {
			t.Fatal(err)
		}
		d.Comms[0].Open = nil
		if _, err := hang.Write(dir, d); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := run(t, "hang", dir); !errors.Is(err, exitStatus(hangNothing)) {
		t.Errorf("nothing in flight: %v, want exit status %d", err, hangNothing)
	}
	intra := hangtest.Plan(t, "--scenario", "intra", "--kind", "gpu", "--culprit", "3")
	intraDir, paths := hangtest.Synthesize(t, intra, hangtruth.Watchdog)
	// The one rank whose kernel never started now runs it like the others: nothing tells them apart.
	d, err := hang.ReadFile(paths[3])
	if err != nil {
		t.Fatal(err)
	}
	other, _ := hang.ReadFile(paths[0])
	d.Comms[0].Open[0].Kernel = other.Comms[0].Open[0].Kernel
	if _, err := hang.Write(intraDir, d); err != nil {
		t.Fatal(err)
	}
	if out, err := run(t, "hang", intraDir); !errors.Is(err, exitStatus(hangNoSuspect)) || !strings.Contains(out, "name no rank to blame") {
		t.Errorf("no suspect: %v\n%s", err, out)
	}
	if _, err := run(t, "hang", t.TempDir()); err == nil || !strings.Contains(err.Error(), "no hang dump (ncclprof-hang-*.json)") {
		t.Errorf("no dump: %v", err)
	}
	if _, err := run(t, "hang"); err == nil || !strings.Contains(err.Error(), "give the directories") {
		t.Errorf("no argument: %v", err)
	}
}

// liveJob runs a hang scenario's ranks as test-host processes through the real plugin (tracing
// on), each staying hung for holdS seconds, and returns their output directory with every rank's
// truth (real hosts and pids).
func liveJob(t *testing.T, nranks int, holdS string, args ...string) (string, []hangtruth.Truth) {
	host, lib := hangtest.Built(t, "ncclprof-testhost"), hangtest.Built(t, "libnccl-profiler-ncclprof.so")
	dir := t.TempDir()
	err := runRanks(nranks, func(r int) *exec.Cmd {
		a := append([]string{"--lib", lib, "--rank", strconv.Itoa(r), "--nranks", strconv.Itoa(nranks),
			"--truth", filepath.Join(dir, fmt.Sprintf("truth-%d.json", r)), "--hold-s", holdS}, args...)
		cmd := exec.Command(host, append(a, "hang")...)
		cmd.Env = append(os.Environ(), "NCCLPROF_TRACE=1", "NCCLPROF_EVENT_MASK=default,kernelch", "NCCLPROF_OUTPUT_DIR="+dir,
			"NCCLPROF_TRACE_DIR="+dir, "NCCLPROF_METRICS=none", "NCCLPROF_HANG_TIMEOUT_S=0")
		return cmd
	})
	if err != nil {
		t.Fatal(err)
	}
	truths := make([]hangtruth.Truth, nranks)
	for r := range truths {
		tr, err := hangtruth.Read(filepath.Join(dir, fmt.Sprintf("truth-%d.json", r)))
		if err != nil {
			t.Fatal(err)
		}
		truths[r] = tr
	}
	return dir, truths
}

// Beside the dumps, the plugin's real traces and summaries speak for the ranks that wrote no
// dump: the absent rank of an intra-node job by its trace (its last AllReduce is the one before),
// a rank that left the loop early by its summary, and ranks that completed the operation by
// their traces (they took part). Dumps are synthesized from the processes' truth until the plugin
// writes its own.
func TestHangTracesAndSummaries(t *testing.T) {
	cases := []struct {
		name  string
		args  []string
		basis string
		check func(t *testing.T, res *hang.Result)
	}{
		{"absent by its trace", []string{"--scenario", "intra", "--kind", "absent", "--culprit", "2"}, hang.BasisTrace, nil},
		{"absent by its summary", []string{"--scenario", "absent", "--culprit", "1", "--culprit-leaves"}, hang.BasisSummary, nil},
		{"finished ranks by their traces", []string{"--scenario", "finished", "--culprit", "2", "--step", "2"}, hang.BasisOwnDump,
			func(t *testing.T, res *hang.Result) {
				// Rank 1 sent to rank 2, whose dump shows it; only rank 0's trace speaks for rank 0.
				for r, want := range map[int]string{0: "no dump; its trace shows it started Reduce seq 2398459", 1: "no dump; its peers show it took part"} {
					if rs := res.Hangs[0].Ranks[r]; rs.State != hang.StateTookPart || rs.Text != want {
						t.Errorf("rank %d, which completed the operation and wrote no dump: %s %q, want %q", r, rs.State, rs.Text, want)
					}
				}
			}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir, truths := liveJob(t, 6, "3", c.args...)
			if _, err := hangtruth.WriteDumps(dir, truths, hangtruth.Watchdog); err != nil {
				t.Fatal(err)
			}
			out, err := run(t, "hang", "--format", "json", dir)
			if err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			var res hang.Result
			if err := json.Unmarshal([]byte(out), &res); err != nil {
				t.Fatal(err)
			}
			hangtest.AssertPlanted(t, &res, truths)
			if len(res.Suspects) == 1 && res.Suspects[0].Basis != c.basis {
				t.Errorf("basis %q, want %q: %s", res.Suspects[0].Basis, c.basis, res.Verdict)
			}
			if c.check != nil {
				c.check(t, &res)
			}
			if t.Failed() {
				text, _ := run(t, "hang", dir)
				t.Log(text)
			}
		})
	}
}
