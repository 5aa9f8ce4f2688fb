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

// rssKB is this process's resident memory (ResidentKB).
func rssKB(t *testing.T) int64 {
	kb, err := ResidentKB()
	if err != nil {
		t.Skip(err)
	}
	return kb
}

// ReadPass maps a large file; the pages Release gives back leave the process (its resident file
// memory falls by about what was given back) and still read as the file's content afterwards.
func TestReadPassGivesPagesBack(t *testing.T) {
	p := filepath.Join(t.TempDir(), "big.json")
	content := bytes.Repeat([]byte(`{"ph":"X","name":"kernel","ts":12345},`), (64<<20)/38)
	if err := os.WriteFile(p, content, 0o644); err != nil {
		t.Fatal(err)
	}
	in, err := ReadPass(p)
	if err != nil {
		t.Fatal(err)
	}
	if !in.mapped {
		t.Skip("the kernel refused to map the file")
	}
	sum, want := 0, 0
	for i := 0; i < len(in.Data); i += 4096 {
		sum += int(in.Data[i]) // every page resident
		want += int(content[i])
	}
	if sum != want {
		t.Fatal("the mapped content differs from the file")
	}
	before := rssKB(t)
	in.Release(int64(len(in.Data) / 2))
	half := rssKB(t)
	in.Done()
	after := rssKB(t)
	if before-half < 24<<10 || before-after < 56<<10 {
		t.Errorf("resident memory %d KB touched, %d KB after half was given back, %d KB after Done: want about 32 and 64 MB less", before, half, after)
	}
	if !bytes.Equal(in.Data, content) {
		t.Fatal("the content read again after its pages were given back differs from the file")
	}
	in.Release(0) // starting over: given back again from the start
	if in.released != 0 {
		t.Errorf("Release(0) after Done left released at %d, want 0", in.released)
	}
}
