// Command ncclmerge joins the ncclprof plugin's NCCL traces with torch.profiler (Kineto) traces
// for Perfetto, and checks traces the way Perfetto's JSON importer reads them.
package main

import (
	"errors"
	"fmt"
	"os"
	"runtime/pprof"

	"github.com/ncclprof/ncclprof/internal/tracefile"
	"github.com/ncclprof/ncclprof/internal/version"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// errReported is returned by a command that has already told the user what went wrong, so
// that main exits non-zero without printing it again.
var errReported = errors.New("reported")

func main() {
	defer tracefile.GuardFaults()()
	stop := startCPUProfile()
	err := newRoot().Execute()
	stop()
	writePeak()
	if err != nil {
		var st exitStatus
		if errors.As(err, &st) { // the command printed its result; the status says what it found
			os.Exit(int(st))
		}
		if !errors.Is(err, errReported) {
			fmt.Fprintln(os.Stderr, "ncclmerge:", err)
		}
		os.Exit(1)
	}
}

// flagError says what a flag wants in words (not Go's strconv text) and where to read more.
func flagError(cmd *cobra.Command, err error) error {
	var bad *pflag.InvalidValueError
	if !errors.As(err, &bad) {
		return fmt.Errorf("%v (see ncclmerge %s --help)", err, cmd.Name())
	}
	want := map[string]string{
		"int": "a whole number", "int64": "a whole number", "uint": "a whole number ≥ 0",
		"float64": "a number", "bool": "true or false", "duration": "a duration such as 500us, 10ms or 2s",
	}[bad.GetFlag().Value.Type()]
	if want == "" {
		want = "a " + bad.GetFlag().Value.Type()
	}
	return fmt.Errorf("--%s %q: want %s (see ncclmerge %s --help)", bad.GetFlag().Name, bad.GetValue(), want, cmd.Name())
}

func newRoot() *cobra.Command {
	root := &cobra.Command{
		Use:   "ncclmerge",
		Short: "Join NCCL plugin traces with torch.profiler traces for Perfetto",
		Long: `ncclmerge joins what the ncclprof plugin recorded inside NCCL with what torch.profiler
(Kineto) recorded around it. Every NCCL kernel on the GPU is linked to the NCCL operation that
launched it, with NCCL's view (sequence number, algorithm, protocol, channels, proxy and network
steps, GPU channel times, bus bandwidth) beside PyTorch's. Open the result in ui.perfetto.dev.`,
		Version:       version.Version,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetFlagErrorFunc(flagError)
	root.AddCommand(mergeCmd(), checkCmd(), statsCmd(), skewCmd(), whyCmd(), pprofCmd(), reportCmd(), hangCmd(), demoCmd(), benchCmd())
	return root
}

// startCPUProfile writes a Go CPU profile of this run to $NCCLMERGE_CPUPROFILE when it is set:
// how the benchmarks' figures are taken apart (go tool pprof build/ncclmerge FILE).
func startCPUProfile() (stop func()) {
	path := os.Getenv("NCCLMERGE_CPUPROFILE")
	if path == "" {
		return func() {}
	}
	f, err := os.Create(path)
	if err == nil {
		err = pprof.StartCPUProfile(f)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "ncclmerge: NCCLMERGE_CPUPROFILE:", err)
		return func() {}
	}
	return func() { pprof.StopCPUProfile(); f.Close() }
}
