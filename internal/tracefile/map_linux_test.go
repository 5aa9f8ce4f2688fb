package tracefile

import (
	"bytes"
	"compress/gzip"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A mapped file reads as ReadFile reads it; a write into the mapping (the UTF-8 repair) does
// not reach the file; small and gzip files are read as ReadFile reads them.
func TestMapFile(t *testing.T) {
	dir := t.TempDir()
	big := bytes.Repeat([]byte(`{"ph":"X","name":"k","ts":1},`), (mapMin+1000)/29+1)
	for name, content := range map[string][]byte{"big.json": big, "small.json": big[:4096]} {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, content, 0o644); err != nil {
			t.Fatal(err)
		}
		got, err := MapFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, content) {
			t.Fatalf("%s: MapFile gave %d bytes that differ from the file's %d", name, len(got), len(content))
		}
		got[0] = '?'
		if again, _ := os.ReadFile(p); !bytes.Equal(again, content) {
			t.Fatalf("%s: a write into the mapped content changed the file", name)
		}
	}
	gz := filepath.Join(dir, "big.json.gz")
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	zw.Write(big)
	zw.Close()
	os.WriteFile(gz, b.Bytes(), 0o644)
	if got, err := MapFile(gz); err != nil || !bytes.Equal(got, big) {
		t.Fatalf("gzip through MapFile: %d bytes, %v", len(got), err)
	}
}

// A named pipe given as a trace is refused at once, as ReadFile refuses it: opening it to map
// it blocked until a writer came.
func TestMapFileRefusesFIFO(t *testing.T) {
	p := filepath.Join(t.TempDir(), "rank0.pt.trace.json")
	if err := syscall.Mkfifo(p, 0o644); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := MapFile(p)
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "named pipe") {
			t.Errorf("MapFile of a FIFO: %v, want it refused as a named pipe", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("MapFile blocked on a FIFO")
	}
}
