package merge

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ncclprof/ncclprof/internal/synth"
	"github.com/ncclprof/ncclprof/internal/testtraces"
)

var updateDigests = flag.Bool("update-digests", false, "rewrite testdata/output-digests.txt (only when the output is meant to change)")

const digestFile = "testdata/output-digests.txt"

// digestCase is one merge whose output's SHA-256 is held fixed.
type digestCase struct {
	name string
	// make writes the Kineto trace into dir and returns its path.
	make func(t *testing.T, dir string) string
	opt  synth.PluginOptions
}

// digestCases: every real trace, with a plain plugin trace and with offsets and dropped
// launches and operations (the order rule, the CPU offset applied); the real traces repeated
// (several copies: the bulk copy across copies, absolute µs rewritten); every synthesized shape.
func digestCases() []digestCase {
	plain := synth.PluginOptions{Seed: 1, Host: "h"}
	hard := synth.PluginOptions{Seed: 2, Host: "h", CPUOffsetNs: 150_000, GPUOffsetNs: 2_500_000_000, DropLaunchEvery: 3, DropOpEvery: 7}
	var cs []digestCase
	for _, name := range []string{"nccl_parser_config_nccl_data.json.gz", "negative_queue_length_values_check_rank0.json.gz",
		"trace_filter_sampled_rank-0.json.gz", "trace_filter_sampled_rank-1.json.gz", "triton_example_triton_example.json.gz",
		"cpu_only_rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz"} {
		real := func(t *testing.T, _ string) string { return testtraces.Kineto(t, name) }
		cs = append(cs, digestCase{name + "/plain", real, plain}, digestCase{name + "/offsets-drops", real, hard})
		if strings.HasPrefix(name, "nccl_parser") || strings.HasPrefix(name, "negative_queue") || strings.HasPrefix(name, "cpu_only") {
			cs = append(cs, digestCase{name + "/3-copies", func(t *testing.T, dir string) string {
				src := testtraces.Kineto(t, name)
				st, err := os.Stat(src)
				if err != nil {
					t.Fatal(err)
				}
				dst := filepath.Join(dir, "repeated.json")
				// a gzip holds 10–30× its size: 40× makes at least three copies
				if _, err := synth.RepeatKineto(src, dst, 40*st.Size()); err != nil {
					t.Fatal(err)
				}
				return dst
			}, hard})
		}
	}
	for _, shape := range synth.ShapeNames() {
		cs = append(cs, digestCase{"synth:" + shape, func(t *testing.T, dir string) string {
			p := filepath.Join(dir, "shape.json")
			if err := synth.KinetoShape(p, synth.Shapes[shape], 3000); err != nil {
				t.Fatal(err)
			}
			return p
		}, hard})
	}
	return cs
}

// TestOutputUnchanged holds the merge's output to the bytes the merge of commit 2e8d75e wrote
// for the same inputs (testdata/output-digests.txt was made with it): a faster merge must write
// the same file. Rewrite the digests (-update-digests) only for a change meant to alter the
// output, and say so in the commit.
func TestOutputUnchanged(t *testing.T) {
	want := readDigests(t)
	got := map[string]string{}
	for _, c := range digestCases() {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			kp := c.make(t, dir)
			var nccl []string
			data, _, err := synth.PluginFromKineto(kp, c.opt)
			switch {
			case err == nil:
				np := filepath.Join(dir, "ncclprof-h-1-0.trace.json")
				if err := os.WriteFile(np, data, 0o644); err != nil {
					t.Fatal(err)
				}
				nccl = []string{np}
			case !strings.Contains(err.Error(), "no NCCL kernels"):
				t.Fatal(err)
			}
			out := filepath.Join(dir, "merged.json")
			if _, err := Run([]string{kp}, nccl, out, Options{}); err != nil {
				t.Fatal(err)
			}
			b, err := os.ReadFile(out)
			if err != nil {
				t.Fatal(err)
			}
			// the summary names the inputs: their directories are not the merge's doing
			b = bytes.ReplaceAll(b, []byte(dir), []byte("$TMP"))
			b = bytes.ReplaceAll(b, []byte(testtraces.KinetoDir(t)), []byte("$TESTDATA"))
			sum := sha256.Sum256(b)
			got[c.name] = hex.EncodeToString(sum[:])
			if !*updateDigests && got[c.name] != want[c.name] {
				if want[c.name] == "" {
					t.Fatalf("no digest for this case in %s: make it with the merge of 2e8d75e (-update-digests there)", digestFile)
				}
				t.Errorf("output (%d bytes) differs from the digest of commit 2e8d75e's merge", len(b))
			}
		})
	}
	if *updateDigests {
		writeDigests(t, got)
	}
}

func readDigests(t *testing.T) map[string]string {
	f, err := os.Open(digestFile)
	if err != nil {
		if *updateDigests {
			return nil
		}
		t.Fatal(err)
	}
	defer f.Close()
	m := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		d, name, ok := strings.Cut(line, "  ")
		if !ok {
			t.Fatalf("%s: bad line %q", digestFile, line)
		}
		m[name] = d
	}
	return m
}

func writeDigests(t *testing.T, m map[string]string) {
	var b strings.Builder
	b.WriteString("# SHA-256 of the merged output per TestOutputUnchanged case, written by the merge of commit 2e8d75e\n")
	for _, k := range slices.Sorted(maps.Keys(m)) {
		fmt.Fprintf(&b, "%s  %s\n", m[k], k)
	}
	if err := os.WriteFile(digestFile, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}
