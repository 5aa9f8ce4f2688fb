package hang

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ncclprof/ncclprof/internal/outfile"
)

var update = flag.Bool("update", false, "rewrite testdata/dump.golden.json (then check it by hand)")

func ptr[T any](v T) *T { return &v }

// sample is a dump of rank 2 of 4 in the middle of an AllReduce whose link to rank 3 stopped on
// channel 1, and of a Send to rank 0 (the plugin's ordinal 4), with every field set.
func sample() *Dump {
	return &Dump{
		Host: "node7", PID: 4242, PluginVersion: "0.1.0", Reason: ReasonTimeout, TimeoutS: 60, EventMask: 3935,
		WrittenUnixNs: 1_800_000_061_000_000_000, FirstDetectedUnixNs: 1_800_000_060_000_000_000, DumpsWritten: 2,
		Health: Health{EventsDropped: 3},
		Comms: []Comm{
			{Hash: "0x00000000000000bb", Name: "pp", Rank: 1, NRanks: 2, NNodes: 2, ABI: 6,
				P2pCompleted: []P2pCompleted{{Peer: 0, Sends: 4, Recvs: 4}}, OpsCompleted: 8,
				Recent: []Call{{Kind: KindP2p, Func: "Recv", Seq: 3, Peer: ptr(0), Count: 1024, Datatype: "ncclBfloat16"},
					{Kind: KindP2p, Func: "Send", Seq: 3, Peer: ptr(0), Count: 1024, Datatype: "ncclBfloat16"}},
				Open: []Op{{Kind: KindP2p, Func: "Send", Seq: 4, Peer: ptr(0), Count: 1024, Datatype: "ncclBfloat16", NChannels: 1,
					StartUnixNs: 1_800_000_000_500_000_000, Launched: ptr(true),
					Proxy: []ProxyOp{{Channel: 0, Peer: 0, Direction: Send, NSteps: 2, StepsDone: 0, StartUnixNs: 1_800_000_000_500_010_000,
						Open: []Step{{Step: 0, State: SendPeerWait, SinceUnixNs: 1_800_000_000_500_020_000}}}}}}},
			{Hash: "0x00000000000000aa", Name: "world", Rank: 2, NRanks: 4, NNodes: 4, ABI: 6,
				Completed: []Completed{{Func: "AllReduce", Ops: 11, LastSeq: 10}, {Func: "Reduce", Ops: 1, LastSeq: 0}}, OpsCompleted: 12,
				Recent: []Call{{Kind: KindColl, Func: "AllReduce", Seq: 10, Count: 262144, Datatype: "ncclFloat32"},
					{Kind: KindColl, Func: "Reduce", Seq: 0, Count: 64, Datatype: "ncclInt8", Root: ptr(3)}},
				Open: []Op{{Kind: KindColl, Func: "AllReduce", Seq: 11, Count: 262144, Datatype: "ncclFloat32", Algorithm: "RING", Protocol: "SIMPLE",
					NChannels: 2, StartUnixNs: 1_800_000_000_000_000_000, Launched: ptr(true),
					Kernel: []KernelCh{{Channel: 1, Started: true, StartUnixNs: 1_800_000_000_000_030_000, GPUStartNs: 1_800_000_000_001_264_567},
						{Channel: 0, Started: true, Stopped: true, StartUnixNs: 1_800_000_000_000_020_000, GPUStartNs: 1_800_000_000_001_254_567, GPUStopNs: 1_800_000_000_006_254_567}},
					Proxy: []ProxyOp{
						{Channel: 1, Peer: 3, Direction: Send, NSteps: 6, StepsDone: 3, StartUnixNs: 1_800_000_000_000_010_000,
							Open: []Step{{Step: 3, State: SendWait, SinceUnixNs: 1_800_000_000_000_040_000}, {Step: 4, State: SendPeerWait, SinceUnixNs: 1_800_000_000_000_050_000}}},
						{Channel: 1, Peer: 1, Direction: Recv, NSteps: 6, StepsDone: 4, StartUnixNs: 1_800_000_000_000_010_000,
							Open: []Step{{Step: 4, State: RecvGPUWait, SinceUnixNs: 1_800_000_000_000_060_000}, {Step: 5, State: RecvWait, SinceUnixNs: 1_800_000_000_000_070_000}}},
						{Channel: 0, Peer: 3, Direction: Send, NSteps: 6, StepsDone: 6, StartUnixNs: 1_800_000_000_000_010_000, Stopped: true},
					}}}},
		},
	}
}

// The exact bytes of a dump, checked by hand: every list in its documented order (communicators
// by hash, channels and ProxyOps by channel then direction), ages from written_unix_ns (61 s
// for the AllReduce, 60.5 s for the Send), partial from the dropped events, empty lists as [].
func TestMarshalGolden(t *testing.T) {
	b, err := Marshal(sample())
	if err != nil {
		t.Fatal(err)
	}
	golden := filepath.Join("testdata", "dump.golden.json")
	if *update {
		os.WriteFile(golden, b, 0o644)
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b, want) {
		t.Errorf("Marshal differs from %s:\n%s", golden, b)
	}
	// Read back, the same dump; written again, the same bytes.
	d, err := Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	again, _ := Marshal(d)
	if !bytes.Equal(again, b) {
		t.Error("a dump read back does not marshal to the same bytes")
	}
}

// Write replaces the previous dump atomically: one file under the process's name, no temporary
// left, and a symlink planted at that name is replaced, not followed.
func TestWriteAtomic(t *testing.T) {
	dir := t.TempDir()
	victim := filepath.Join(t.TempDir(), "victim")
	os.WriteFile(victim, []byte("keep"), 0o644)
	os.Symlink(victim, filepath.Join(dir, FileName("node7", 4242)))
	d := sample()
	for i := 1; i <= 2; i++ {
		d.DumpsWritten = i
		p, err := Write(dir, d)
		if err != nil {
			t.Fatal(err)
		}
		if filepath.Base(p) != "ncclprof-hang-node7-4242.json" {
			t.Errorf("written as %s", p)
		}
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 {
		t.Errorf("%d files in the directory, want the dump alone", len(ents))
	}
	got, err := ReadFile(filepath.Join(dir, FileName("node7", 4242)))
	if err != nil || got.DumpsWritten != 2 {
		t.Errorf("read back: %+v, %v", got, err)
	}
	if b, _ := os.ReadFile(victim); string(b) != "keep" {
		t.Error("the dump was written through a planted symlink")
	}
}

// A dump the analysis could misread is refused with the field and what is wrong with it.
func TestValidate(t *testing.T) {
	cases := []struct {
		name string
		edit func(d *Dump)
		want string
	}{
		{"hash", func(d *Dump) { d.Comms[1].Hash = "0xAA" }, `comms[1]: comm_hash "0xAA"`},
		{"rank", func(d *Dump) { d.Comms[1].Rank = 4 }, "comms[1]: rank 4 of nranks 4"},
		{"reason", func(d *Dump) { d.Reason = "bored" }, `reason "bored"`},
		{"peer", func(d *Dump) { d.Comms[0].Open[0].Peer = nil }, "comms[0]: open_ops[0]: a point-to-point operation needs a peer"},
		{"state", func(d *Dump) { d.Comms[1].Open[0].Proxy[0].Open[0].State = RecvWait }, `comms[1]: open_ops[0]: proxy_ops[0]: open_steps[0]: state "RecvWait" on a send`},
		{"order", func(d *Dump) { d.Comms[1].Open[0].Proxy[0].Open[0].Step = 2 }, "open_steps[0]: step 2 after 2 of nsteps 6"},
		{"done", func(d *Dump) { d.Comms[1].Open[0].Proxy[0].StepsDone = 7 }, "steps_done 7 of nsteps 6"},
		{"channel", func(d *Dump) { d.Comms[1].Open[0].Kernel[0].Channel = 64 }, "kernel_channels[0]: channel 64"},
		{"stopped", func(d *Dump) { d.Comms[1].Open[0].Proxy[1].Stopped = true }, "stopped with 2 steps open"},
	}
	for _, c := range cases {
		d := sample()
		d.FormatVersion = Version
		c.edit(d)
		if err := d.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
		if _, err := Write(t.TempDir(), d); err == nil {
			t.Errorf("%s: Write accepted an invalid dump", c.name)
		}
	}
}

// Files that are not whole dumps are reported in words that say what is done about them.
func TestParseProblems(t *testing.T) {
	good, _ := Marshal(sample())
	cases := map[string]struct {
		b    []byte
		want string
	}{
		"empty":   {nil, "empty: its process is treated as one without a dump"},
		"cut":     {good[:len(good)/3], "cut short after"},
		"garbage": {[]byte("\x00\x01not json"), "not a hang dump"},
		"trace":   {[]byte(`{"traceEvents":[]}`), "not a hang dump (no ncclprof_hang_version)"},
		"newer":   {bytes.Replace(good, []byte(`"ncclprof_hang_version": 1`), []byte(`"ncclprof_hang_version": 2`), 1), "written in format 2 by a newer ncclprof"},
		"invalid": {bytes.Replace(good, []byte(`"nranks": 4`), []byte(`"nranks": 2`), 1), "invalid (comms[0]: rank 2 of nranks 2)"},
	}
	for name, c := range cases {
		if _, err := Parse(c.b); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", name, err, c.want)
		}
	}
}

// NCCL's numeric ProxyStep states (ncclProfilerEventState_t, profiler API v4+) by name.
func TestStepStateNames(t *testing.T) {
	want := map[int]string{8: SendGPUWait, 20: SendPeerWait, 9: SendWait, 10: RecvWait, 11: RecvFlushWait, 12: RecvGPUWait}
	for v := -1; v < 32; v++ {
		name, ok := StepState(v)
		if w, isStep := want[v]; ok != isStep || name != w {
			t.Errorf("StepState(%d) = %q, %v; want %q, %v", v, name, ok, w, isStep)
		}
	}
}

// Issue 23, items 5 and 6 (the writing side). Containers with their own PID namespaces that
// share a host name and a directory give their processes the same pid: each process's dumps
// must land in a file of its own, never over another's. A name someone else created first (in
// a shared sticky directory, another user's file the dump could not replace) must not stop the
// dump either: not one name, not every numbered name.
func TestWriterNeverWritesOverAnotherProcess(t *testing.T) {
	dir := t.TempDir()
	other := filepath.Join(dir, FileName("node7", 4242))
	os.WriteFile(other, []byte("another container's dump"), 0o644)
	d := sample()
	var w Writer
	w.Dir = dir
	for i := 1; i <= 2; i++ { // the second rewrites the name the first claimed
		d.DumpsWritten = i
		p, err := w.Write(d)
		if err != nil {
			t.Fatal(err)
		}
		if filepath.Base(p) != "ncclprof-hang-node7-4242.1.json" || !IsDumpName(p) {
			t.Errorf("dump %d written as %s", i, p)
		}
	}
	if b, _ := os.ReadFile(other); string(b) != "another container's dump" {
		t.Errorf("the other process's dump was overwritten: %.40q", b)
	}
	got, err := ReadFile(filepath.Join(dir, "ncclprof-hang-node7-4242.1.json"))
	if err != nil || got.DumpsWritten != 2 {
		t.Errorf("read back: %+v, %v", got, err)
	}
	// A second process of the same name claims the next one.
	w2 := Writer{Dir: dir}
	if p, err := w2.Write(d); err != nil || filepath.Base(p) != "ncclprof-hang-node7-4242.2.json" {
		t.Errorf("second process: %s, %v", p, err)
	}
}

func TestWriterEveryNumberedNameTaken(t *testing.T) {
	dir := t.TempDir()
	for n := 0; n < outfile.MaxTries; n++ {
		name := FileName("node7", 4242)
		if n > 0 {
			name = fmt.Sprintf("ncclprof-hang-node7-4242.%d.json", n)
		}
		os.WriteFile(filepath.Join(dir, name), nil, 0o644)
	}
	w := Writer{Dir: dir}
	p, err := w.Write(sample())
	if err != nil {
		t.Fatalf("every numbered name taken: %v", err)
	}
	if got, err := ReadFile(p); err != nil || got.PID != 4242 || !IsDumpName(p) {
		t.Errorf("%s: %v", p, err)
	}
}

// A rewrite whose claimed name can no longer be replaced claims another rather than failing
// (here the name became a directory; in a sticky directory, another user's file in its place
// refuses the rename the same way).
func TestWriterClaimsAnotherNameWhenItsOwnIsLost(t *testing.T) {
	dir := t.TempDir()
	w := Writer{Dir: dir}
	p1, err := w.Write(sample())
	if err != nil {
		t.Fatal(err)
	}
	os.Remove(p1)
	os.MkdirAll(filepath.Join(p1, "x"), 0o755) // a non-empty directory: rename cannot replace it
	p2, err := w.Write(sample())
	if err != nil || p2 == p1 {
		t.Fatalf("rewrite: %s, %v; want a new name", p2, err)
	}
	if got, err := ReadFile(p2); err != nil || got.PID != 4242 {
		t.Errorf("%s: %v", p2, err)
	}
}

// Item 5, read back: the dumps of four ranks that share a host name and a pid (containers with
// their own PID namespaces) are four processes to the analysis, not one dump read four times;
// a copy of one of them still counts once.
func TestLoadKeepsProcessesSharingAPID(t *testing.T) {
	dir := t.TempDir()
	for r := 0; r < 4; r++ {
		d := sample()
		d.PID = 1
		for i := range d.Comms {
			d.Comms[i].Rank, d.Comms[i].NRanks = r, 4
		}
		if _, err := (&Writer{Dir: dir}).Write(d); err != nil {
			t.Fatal(err)
		}
	}
	copyDir := t.TempDir()
	b, _ := os.ReadFile(filepath.Join(dir, FileName("node7", 1)))
	os.WriteFile(filepath.Join(copyDir, FileName("node7", 1)), b, 0o644)
	in, err := Load([]string{dir, copyDir})
	if err != nil {
		t.Fatal(err)
	}
	if len(in.Dumps) != 4 {
		t.Errorf("%d dumps loaded, want the 4 processes", len(in.Dumps))
	}
}
