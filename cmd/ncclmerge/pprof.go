package main

import (
	"fmt"
	"io"

	"github.com/ncclprof/ncclprof/internal/pprofout"
	"github.com/ncclprof/ncclprof/internal/tracefile"
	"github.com/ncclprof/ncclprof/internal/words"
	"github.com/spf13/cobra"
)

func pprofCmd() *cobra.Command {
	var (
		out   string
		quiet bool
	)
	c := &cobra.Command{
		Use:   "pprof TRACE... -o profile.pb.gz",
		Short: "Write communication time as a pprof profile (flame graph with go tool pprof -http)",
		Long: `Write a pprof profile of NCCL communication: one sample per operation, whose stack is
  rank (host, pid) → communicator (size, rank in it) → function and size bucket → channel → peer
(the channel and peer of each network send, else each GPU channel, where the trace has them),
with three values — time (ns; the operation's kernel time in merged traces, else its completion
span), bytes (nccl-tests' size) and operations (count) — and labels algo, proto and step.
An operation's time and bytes are split evenly over its channels. The totals equal the traces'.

View it with:  go tool pprof -http=:8080 profile.pb.gz   (Flame Graph; -sample_index=bytes)
or: go tool pprof -top -tagfocus=algo=RING profile.pb.gz

` + traceArgsHelp,
		Example: `  ncclmerge pprof ncclprof-out/ -o comm.pb.gz && go tool pprof -http=:8080 comm.pb.gz`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if out == "" {
				return fmt.Errorf("-o is required: the profile file to write (e.g. -o comm.pb.gz)")
			}
			set, err := readOps(cmd, args, quiet, true, output{out, "comm.pb.gz"})
			if err != nil {
				return err
			}
			p := pprofout.Build(set)
			if err := writeAtomic(out, func(w io.Writer) error { return pprofout.Write(w, p) }); err != nil {
				return err
			}
			if !quiet {
				t, b, n := pprofout.Totals(p)
				scaled := ""
				if l := set.Sampling.Label(); l != "" {
					scaled = " (" + l + ": estimates, scaled up)"
				}
				fmt.Fprintf(cmd.ErrOrStderr(), "wrote %s: %s, %s, %.3f ms%s (go tool pprof -http=:8080 %s)\n",
					out, words.Count(int(n), "operation"), fmtBytes(b), float64(t)/1e6, scaled, out)
			}
			return nil
		},
	}
	c.Flags().StringVarP(&out, "output", "o", "", "the profile to write (.pb.gz)")
	c.Flags().BoolVarP(&quiet, "quiet", "q", false, "no progress on stderr")
	return c
}

// writeAtomic writes a file under a temporary name and renames it, so that a failure never
// leaves half a file.
func writeAtomic(path string, write func(io.Writer) error) error {
	w, err := tracefile.CreateRaw(path)
	if err != nil {
		return err
	}
	if err := write(w); err != nil {
		w.Abort()
		return err
	}
	return w.Close()
}
