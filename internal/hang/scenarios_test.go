package hang_test

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ncclprof/ncclprof/internal/hang"
	"github.com/ncclprof/ncclprof/internal/hang/hangtest"
	"github.com/ncclprof/ncclprof/internal/hang/hangtruth"
)

func analyze(t *testing.T, dir string) *hang.Result {
	t.Helper()
	in, err := hang.Load([]string{dir})
	if err != nil {
		t.Fatal(err)
	}
	return hang.Analyze(in)
}

// Each planted hang is named exactly — the culprit, its kind, the operation and, for a link,
// the pair and channel — from dumps synthesized from the test host's ground truth, whether
// only the ranks with something in flight dumped (the watchdog) or every rank did (on request).
func TestScenariosNamePlantedCulprit(t *testing.T) {
	cases := [][]string{
		{"--scenario", "absent", "--culprit", "5"},
		{"--scenario", "absent", "--culprit", "0", "--nranks", "3"},
		{"--scenario", "gpu", "--culprit", "5"},
		{"--scenario", "gpu", "--culprit", "7", "--nranks", "16", "--channels", "8"},
		{"--scenario", "link", "--culprit", "2", "--channel", "1", "--step", "3"},
		{"--scenario", "link", "--culprit", "7", "--channel", "0", "--step", "0"},
		{"--scenario", "link", "--culprit", "4", "--channel", "3", "--step", "9", "--nranks", "12"},
		{"--scenario", "intra", "--kind", "gpu", "--culprit", "3"},
		{"--scenario", "intra", "--kind", "absent", "--culprit", "6"},
		{"--scenario", "twocomms", "--culprit", "1", "--culprit2", "2"},
		{"--scenario", "finished", "--culprit", "3", "--step", "2"},
	}
	eachPlanted(t, cases, nil)
}

// eachPlanted runs every case with only the ranks in flight dumping and with all of them, checks
// that the verdict names exactly the planted culprits, then what more checks (nil: nothing).
func eachPlanted(t *testing.T, cases [][]string, more func(*testing.T, *hang.Result, []hangtruth.Truth)) {
	for _, args := range cases {
		for _, mode := range []hangtruth.Mode{hangtruth.Watchdog, hangtruth.Requested} {
			t.Run(fmt.Sprintf("%s/mode%d", strings.Join(args, " "), mode), func(t *testing.T) {
				truths := hangtest.Plan(t, args...)
				dir, _ := hangtest.Synthesize(t, truths, mode)
				res := analyze(t, dir)
				hangtest.AssertPlanted(t, res, truths)
				if more != nil {
					more(t, res, truths)
				}
				if t.Failed() || testing.Verbose() {
					var b strings.Builder
					res.Write(&b, "text")
					t.Log(b.String())
				}
			})
		}
	}
}

// cut truncates a dump as a copy interrupted halfway would.
func cut(t *testing.T, path string) {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b[:len(b)/2], 0o644); err != nil {
		t.Fatal(err)
	}
}

// Dumps missing for some ranks, or cut: still exactly the planted culprit, the lost dumps
// reported as problems and their ranks not blamed, as long as their peers' dumps show them
// taking part. Where the culprit's own dump is the one lost, its peers still point at it.
func TestMissingAndCutDumps(t *testing.T) {
	cases := []struct {
		name     string
		args     []string
		skip     []int // dumps lost
		cut      []int // dumps cut in half
		want     []hangtest.Suspect
		problems int
	}{
		{name: "link, two lost, one cut", args: []string{"--scenario", "link", "--culprit", "2"}, skip: []int{0, 5}, cut: []int{6}, problems: 1},
		{name: "gpu, neighbours lost and cut", args: []string{"--scenario", "gpu", "--culprit", "5"}, skip: []int{4}, cut: []int{6}, problems: 1},
		{name: "absent, another rank lost too", args: []string{"--scenario", "absent", "--culprit", "5"}, skip: []int{2}},
		{name: "absent, every other dump cut but the neighbours'", args: []string{"--scenario", "absent", "--culprit", "5", "--nranks", "16"}, cut: []int{0, 1, 2, 8, 9, 10, 11, 12, 13, 14, 15}, problems: 11},
		{name: "twocomms, a dump of each half lost", args: []string{"--scenario", "twocomms", "--culprit", "1", "--culprit2", "2"}, skip: []int{3, 4}},
		{name: "gpu, the culprit's own dump lost", args: []string{"--scenario", "gpu", "--culprit", "5"}, skip: []int{5},
			want: []hangtest.Suspect{{Rank: 5, Kind: hang.StateUnknown, Comm: "0x48a6000000000002", Seq: 2398459, Func: "AllReduce", Peer: -1, Channel: -1}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			truths := hangtest.Plan(t, c.args...)
			dir, paths := hangtest.Synthesize(t, truths, hangtruth.Watchdog, c.skip...)
			for _, r := range c.cut {
				cut(t, paths[r])
			}
			res := analyze(t, dir)
			if c.want == nil {
				hangtest.AssertPlanted(t, res, truths)
			} else if got := hangtest.Got(res); !slices.Equal(got, c.want) {
				t.Errorf("suspects %v, want %v\n%s", got, c.want, res.Verdict)
			}
			if len(res.Dumps.Problems) != c.problems {
				t.Errorf("%d problems, want %d: %v", len(res.Dumps.Problems), c.problems, res.Dumps.Problems)
			}
			for _, p := range res.Dumps.Problems {
				if !strings.Contains(p.Msg, "cut short after") || !strings.Contains(p.Msg, "treated as one without a dump") {
					t.Errorf("%s: %q does not say it was cut and what is done about it", p.Path, p.Msg)
				}
			}
			if t.Failed() || testing.Verbose() {
				var b strings.Builder
				res.Write(&b, "text")
				t.Log(b.String())
			}
		})
	}
}

// At 1024 ranks the verdict still names exactly the planted culprit, and the evidence stays
// compact: ranks in the same situation share a line.
func TestThousandRanks(t *testing.T) {
	for _, args := range [][]string{
		{"--scenario", "absent", "--culprit", "517"},
		{"--scenario", "gpu", "--culprit", "1000"},
		{"--scenario", "link", "--culprit", "77", "--channel", "5", "--step", "40"},
		{"--scenario", "mismatch", "--what", "count", "--culprit", "300"},
		{"--scenario", "mismatch", "--what", "function", "--culprit", "1023"},
		{"--scenario", "order", "--culprit", "0"},
	} {
		t.Run(strings.Join(args[1:4], " "), func(t *testing.T) {
			truths := hangtest.Plan(t, append(args, "--nranks", "1024", "--channels", "8")...)
			dir, _ := hangtest.Synthesize(t, truths, hangtruth.Watchdog)
			start := time.Now()
			res := analyze(t, dir)
			took := time.Since(start)
			hangtest.AssertPlanted(t, res, truths)
			var b strings.Builder
			res.Write(&b, "text")
			if n := strings.Count(b.String(), "\n"); n > 20 {
				t.Errorf("%d lines of text for 1024 ranks: not compact\n%s", n, b.String())
			}
			t.Logf("%d dumps read and analyzed in %v (in the test process)\n%s", res.Dumps.Read, took, b.String())
		})
	}
}

// Every time: the culprit at every position of rings of several sizes, a link stopped on every
// channel and at early, middle and late steps — always exactly the planted one.
func TestEveryPlacement(t *testing.T) {
	var cases [][]string
	for _, n := range []int{3, 5, 8, 13} {
		for c := 0; c < n; c++ {
			for _, kind := range []string{"absent", "gpu"} {
				cases = append(cases, []string{"--scenario", kind, "--culprit", fmt.Sprint(c), "--nranks", fmt.Sprint(n), "--channels", "2"})
			}
			for ch := 0; ch < 2; ch++ {
				for _, step := range []int{0, n - 1, 2*n - 3} {
					cases = append(cases, []string{"--scenario", "link", "--culprit", fmt.Sprint(c), "--nranks", fmt.Sprint(n), "--channels", "2",
						"--channel", fmt.Sprint(ch), "--step", fmt.Sprint(step)})
				}
			}
		}
	}
	for _, args := range cases {
		truths := hangtest.Plan(t, args...)
		dir, _ := hangtest.Synthesize(t, truths, hangtruth.Watchdog)
		res := analyze(t, dir)
		if want, got := hangtest.Want(truths), hangtest.Got(res); !slices.Equal(want, got) {
			t.Errorf("%v: suspects %v, want %v\n%s", args, got, want, res.Verdict)
		}
	}
	t.Logf("%d placements", len(cases))
}

// NCCL before 2.27 (ABI v1-v3) records no SendPeerWait: a send refused for want of a receive
// buffer keeps its step in SendGPUWait, and only its ProxyOp's own state says SendRemFifoWait
// (net.cc sendProxyProgress, v2.23.4-1 to v2.26.6-1). The test host plays that at --abi 1-3,
// and every planted hang is still named exactly, with the refused send read as a wait for the
// peer. Read as it stood, the ranks upstream of a rank in another collective (the order cycle,
// 64 ranks) had full receive buffers and no send waiting on the network, and four of them were
// blamed as stopped GPUs beside the planted rank.
func TestScenariosBefore227(t *testing.T) {
	for _, abi := range []string{"1", "3"} {
		cases := [][]string{
			{"--scenario", "absent", "--culprit", "5"},
			{"--scenario", "gpu", "--culprit", "5"},
			{"--scenario", "link", "--culprit", "2", "--channel", "1", "--step", "3"},
			{"--scenario", "twocomms", "--culprit", "1", "--culprit2", "2"},
			{"--scenario", "finished", "--culprit", "3", "--step", "2"},
			{"--scenario", "mismatch", "--what", "count", "--culprit", "33", "--nranks", "64", "--channels", "2"},
			{"--scenario", "order", "--culprit", "33", "--nranks", "64", "--channels", "2"},
		}
		for i := range cases {
			cases[i] = append(cases[i], "--abi", abi)
		}
		eachPlanted(t, cases, func(t *testing.T, res *hang.Result, truths []hangtruth.Truth) {
			refused, kernels := 0, 0 // sends the dumps show refused (SendRemFifoWait); KernelCh channels
			for _, tr := range truths {
				for _, c := range tr.Dump.Comms {
					for _, o := range c.Open {
						kernels += len(o.Kernel)
						for _, p := range o.Proxy {
							if p.State == hang.SendRemFifoWait {
								refused++
							}
						}
					}
				}
			}
			if truths[0].Scenario == "order" && refused == 0 {
				t.Error("no send refused for want of a buffer in the order cycle: the host does not play ABI < 4")
			}
			if abi == "1" && kernels > 0 {
				t.Errorf("%d KernelCh channels shown, which NCCL 2.23 (ABI v1) never reports", kernels)
			}
		})
	}
	// Intra-node, only KernelCh says anything (no ProxyOps): before ABI v3 nothing does, and the
	// host says so rather than plant a hang no dump could show.
	host := hangtest.Built(t, "ncclprof-testhost")
	if _, err := hangtruth.Plan(host, t.TempDir(), "--scenario", "intra", "--kind", "gpu", "--culprit", "3", "--abi", "2"); err == nil || !strings.Contains(err.Error(), "needs KernelCh") {
		t.Errorf("intra-node hang at ABI v2: %v, want it refused (no KernelCh before 2.26)", err)
	}
}
