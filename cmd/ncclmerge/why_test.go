package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/ncclprof/ncclprof/internal/why"
)

// ncclmerge why: its help names every cause, bad flags say what to give, and its JSON of a trace
// with nothing late says so (an empty list of rows, not null).
func TestWhyCommand(t *testing.T) {
	out, err := run(t, "why", "--help")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{why.GPUCompute, why.Dependency, why.Host, why.Network, why.Unknown, "--arrival", "ncclmerge merge", "Example"} {
		if !strings.Contains(out, want) {
			t.Errorf("why --help does not mention %q", want)
		}
	}
	for args, want := range map[string]string{
		"why --arrival sideways x":  `--arrival "sideways": want auto, gpu or cpu`,
		"why --format yaml x":       `--format "yaml": want table or json`,
		"why --slow-factor 1 x":     "--k must be above 0 and --slow-factor above 1 (e.g. --k 5 --slow-factor 2)",
		"skew --arrival sideways x": `--arrival "sideways": want auto, gpu or cpu`,
	} {
		if _, err := run(t, strings.Fields(args)...); err == nil || err.Error() != want {
			t.Errorf("%s: %v, want %q", args, err, want)
		}
	}
	_, _, nccl, _ := tinyInputs(t)
	out, err = run(t, "why", "-q", "--json", nccl)
	var res why.Result
	if err != nil || json.Unmarshal([]byte(out), &res) != nil || res.Rows == nil || len(res.Rows) != 0 || res.LateArrivals != 0 {
		t.Errorf("why --json of a trace with nothing late: %v %q", err, out)
	}
}
