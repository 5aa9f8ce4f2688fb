package tools_test

import (
	"errors"
	"os/exec"
	"strings"
	"testing"
)

// tools/progress.sh keeps what a person reads of a long step: its errors and its own lines, a
// heartbeat with the modules downloaded counted instead of listed, and the step's exit status.
func TestProgressLog(t *testing.T) {
	step := `echo "go: downloading github.com/a/b v1.2.3"; echo "go: downloading github.com/c/d v0.1.0"
echo "go: downloading go1.26.0 (linux/amd64)"; echo "go: added github.com/a/b v1.2.3"
echo "compile error: x.go:1: bad" >&2; sleep 2.5; exit 7`
	cmd := exec.Command("./progress.sh", "building a thing", "3 s", "sh", "-c", step)
	cmd.Env = append(cmd.Environ(), "NCCLPROF_PROGRESS_EVERY=1")
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 7 {
		t.Fatalf("want the step's exit status 7, got %v\n%s", err, out)
	}
	log := string(out)
	for _, want := range []string{
		"building a thing (about 3 s the first time) ...\n",
		"go: downloading go1.26.0 (linux/amd64)\n", // the toolchain: one line, and it takes a while
		"compile error: x.go:1: bad\n",
		"  ... building a thing: 0m0", "so far, 2 Go modules downloaded\n",
	} {
		if !strings.Contains(log, want) {
			t.Errorf("the log lacks %q:\n%s", want, log)
		}
	}
	for _, noise := range []string{"github.com/a/b", "github.com/c/d", "go: added"} {
		if strings.Contains(log, noise) {
			t.Errorf("the log lists %q, a line per module:\n%s", noise, log)
		}
	}
}
