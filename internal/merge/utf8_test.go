package merge

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"unicode/utf8"

	"github.com/ncclprof/ncclprof/internal/tracecheck"
)

// Bytes that are not UTF-8 in either input (a kernel name, a communicator name) were copied
// into the merged output, which check passed and JSON readers refuse. They are written as '?'
// (one byte for one: every other byte stays where it was) and the summary counts them.
func TestInvalidUTF8Repaired(t *testing.T) {
	dir := t.TempDir()
	k, _ := os.ReadFile("testdata/tiny_kineto.json")
	n, _ := os.ReadFile("testdata/tiny_nccl.trace.json")
	k = bytes.Replace(k, []byte(`"name": "python"`), []byte("\"name\": \"pyth\xc3on\""), 1)
	n = bytes.Replace(n, []byte(`"name":"world"`), []byte("\"name\":\"wor\xffld\""), 1)
	if utf8.Valid(k) || utf8.Valid(n) {
		t.Fatal("the inputs were not damaged")
	}
	kp, np := filepath.Join(dir, "k.json"), filepath.Join(dir, "n.trace.json")
	os.WriteFile(kp, k, 0o644)
	os.WriteFile(np, n, 0o644)
	out := filepath.Join(dir, "m.json")
	sum, err := Run([]string{kp}, []string{np}, out, Options{})
	if err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(out)
	if !utf8.Valid(data) {
		t.Fatal("the output is not valid UTF-8")
	}
	if !bytes.Contains(data, []byte(`"pyth?on"`)) || !bytes.Contains(data, []byte(`wor?ld`)) {
		t.Error("the bad bytes were not written as '?'")
	}
	if got := sum.Ranks[0].InvalidUTF8; got != 2 {
		t.Errorf("summary counts %d bad bytes, want 2", got)
	}
	if rep, _ := tracecheck.File(out); !rep.OK() {
		t.Errorf("check: %+v", rep.Findings)
	}
	if rep, _ := tracecheck.File(kp); rep.Count(tracecheck.CodeInvalidUTF8) != 1 {
		t.Errorf("check of the damaged input: %+v", rep.Findings)
	}
}
