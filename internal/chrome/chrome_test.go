package chrome

import (
	"encoding/json"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The file is a complete JSON document after every flush, and Close adds the closing members.
func TestValidAfterEveryFlush(t *testing.T) {
	dir := t.TempDir()
	w, err := Create(dir, "t.trace.json", 1_700_000_000_000_000_000, []byte(`"schemaVersion":1,"baseTimeNanoseconds":1700000000000000000`))
	if err != nil {
		t.Fatal(err)
	}
	check := func(wantEvents int) map[string]any {
		b, err := os.ReadFile(w.Path())
		if err != nil {
			t.Fatal(err)
		}
		var doc map[string]any
		if err := json.Unmarshal(b, &doc); err != nil {
			t.Fatalf("not valid JSON after a flush: %v\n%s", err, b)
		}
		if n := len(doc["traceEvents"].([]any)); n != wantEvents {
			t.Fatalf("%d events, want %d", n, wantEvents)
		}
		return doc
	}
	check(0)
	for i := 0; i < 3; i++ {
		e := w.Event('X', "Send \"x\"\n", "nccl_p2p", 42, 7)
		e.Ts("ts", 1_700_000_000_000_000_000+int64(i)*1500+7).Dur("dur", 999)
		e.Args().Hex("id", 0xabc).Int("peer", int64(i)).Str("label", "\xff bad utf8").End()
		if err := w.Flush(); err != nil {
			t.Fatal(err)
		}
		check(i + 1)
	}
	if err := w.Close([]byte(`"ncclprofEnd":{"complete":true}`)); err != nil {
		t.Fatal(err)
	}
	doc := check(3)
	ev := doc["traceEvents"].([]any)[2].(map[string]any)
	if ev["ts"].(float64) != 3.007 || ev["dur"].(float64) != 0.999 || ev["name"] != "Send \"x\"\n" {
		t.Errorf("event %v", ev)
	}
	args := ev["args"].(map[string]any)
	if args["id"] != "0x0000000000000abc" || args["peer"].(float64) != 2 || !strings.Contains(args["label"].(string), "\ufffd") {
		t.Errorf("args %v", args)
	}
	if doc["ncclprofEnd"].(map[string]any)["complete"] != true {
		t.Error("closing members missing")
	}
}

// An existing file, or a symlink planted at the name, is never written through.
func TestNeverOverwrites(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "victim")
	if err := os.WriteFile(target, []byte("keep"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, filepath.Join(dir, "link.json")); err != nil {
		t.Fatal(err)
	}
	if _, err := Create(dir, "link.json", 0, []byte(`"a":1`)); err == nil {
		t.Fatal("created through a symlink")
	}
	if _, err := Create(dir, "victim", 0, []byte(`"a":1`)); !IsExist(err) {
		t.Fatalf("overwrote an existing file: %v", err)
	}
	if b, _ := os.ReadFile(target); string(b) != "keep" {
		t.Fatalf("victim changed: %q", b)
	}
}

// Random overlapping intervals: every lane's slices nest or are disjoint.
func TestLanesNest(t *testing.T) {
	var l Lanes
	rng := rand.New(rand.NewSource(1))
	placed := map[int][]span{}
	for i := 0; i < 3000; i++ {
		s := int64(rng.Intn(100000))
		e := s + int64(rng.Intn(5000))
		lane := l.Place(s, e)
		placed[lane] = append(placed[lane], span{s, e})
	}
	if l.Overflow != 0 {
		t.Fatalf("%d overflows", l.Overflow)
	}
	for lane, sps := range placed {
		// Within laneMemory of each other (what a lane checks), nothing partially overlaps.
		for i := range sps {
			for j := i + 1; j < len(sps) && j < i+laneMemory; j++ {
				if conflicts(sps[i], sps[j]) {
					t.Fatalf("lane %d: %v and %v overlap partially", lane, sps[i], sps[j])
				}
			}
		}
	}
	if len(placed) < 2 {
		t.Errorf("overlapping slices all on one lane")
	}
}
