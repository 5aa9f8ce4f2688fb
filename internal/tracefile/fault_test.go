//go:build linux

package tracefile

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// A mapped trace cut short while it is read makes the next read past its new end fault: in a
// goroutine under GuardFaults that ends the program with a message naming the file and exit
// status 1, not a runtime crash dump. (The child process does the read; the test reads what it
// printed.)
func TestTruncatedWhileMappedIsSaid(t *testing.T) {
	if path := os.Getenv("TRACEFILE_FAULT_CHILD"); path != "" {
		faultChild(path)
		return
	}
	path := filepath.Join(t.TempDir(), "cut.json")
	if err := os.WriteFile(path, make([]byte, 2*mapMin), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestTruncatedWhileMappedIsSaid$")
	cmd.Env = append(os.Environ(), "TRACEFILE_FAULT_CHILD="+path)
	out, err := cmd.CombinedOutput()
	code := -1
	if cmd.ProcessState != nil {
		code = cmd.ProcessState.ExitCode()
	}
	if code != 1 || !strings.Contains(string(out), "cut.json changed while it was being read") || strings.Contains(string(out), "goroutine ") {
		t.Fatalf("exit %d (%v), output:\n%s\nwant exit 1 and the message, no crash dump", code, err, out)
	}
}

func faultChild(path string) {
	p, err := ReadPass(path)
	if err != nil || !p.mapped {
		println("not mapped:", err)
		os.Exit(3)
	}
	if err := os.Truncate(path, 0); err != nil {
		os.Exit(4)
	}
	done := make(chan byte)
	go func() {
		defer GuardFaults()()
		v := p.Data[len(p.Data)-1] // read here: a fault inside the runtime (a channel send) cannot be recovered
		done <- v
	}()
	<-done
	os.Exit(0) // the read found data: the fault was not raised
}
