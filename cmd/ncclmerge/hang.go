package main

import (
	"errors"
	"fmt"
	"slices"

	"github.com/ncclprof/ncclprof/internal/hang"
	"github.com/spf13/cobra"
)

// Exit statuses of ncclmerge hang (documented in its help and docs/hang.md).
const (
	hangNoSuspect = 2 // operations are in flight, but the dumps name nobody
	hangNothing   = 3 // no dump shows an operation in flight
)

// exitStatus is an error that tells main which status to exit with, the result having been
// printed already.
type exitStatus int

func (e exitStatus) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

func hangCmd() *cobra.Command {
	var format string
	c := &cobra.Command{
		Use:   "hang DIR...",
		Short: "Name the rank, the operation and the link a hung job waits for (or the ranks that disagree about it), from the plugin's in-flight dumps",
		Long: `When an NCCL operation has been in flight for NCCLPROF_HANG_TIMEOUT_S seconds (60 by default), each
rank's plugin writes ncclprof-hang-<host>-<pid>.json: every operation still open, per channel its
kernel, per ProxyOp how far it got and the state of its open steps. ncclprof_dump_inflight()
(ncclprof.dump_inflight() in Python) writes one on demand. This command reads every rank's dump
(and, beside them, the plugin's communicator summaries and traces), matches the operations across
ranks by (communicator, function, seq; a CUDA graph's replays by their order, "seq replay n"),
and names who to blame:

  mismatch ranks that disagree about the operation they are in: at the same point (after the
          last operation they agree on) a rank called another collective, or the same one with
          another count, datatype or root, or a point-to-point operation with another peer; or
          the ranks called the collectives of two communicators in different orders (a cycle:
          each side waits in one for the other). The smaller side is named, with what it called
          and what the others called (every side when they split evenly);
  absent  a rank that never started the operation the others are in (a divergent code path, a
          stuck or crashed host process). A rank with nothing in flight writes no dump, so the
          absent rank is often the one without a dump: its peers' ProxyOps, its summary or
          its trace then say whether it took part;
  gpu     a rank whose GPU stopped: its sends wait for the GPU (SendGPUWait) while its receive
          buffers hold data the GPU never consumed (RecvGPUWait), its kernel started and never
          finished; or its kernel was launched and never started;
  link    a rank pair and channel where a send was handed to the network and never completed
          (SendWait) while the receiver waits for that same step (RecvWait);
  unknown a rank without a dump at which the operation stopped (its peers filled its buffers
          and got nothing back), whose own dump would tell GPU from link.

The ranks that wait are evidence, not suspects. The text output starts with one verdict line
per hung operation, then the evidence per rank, ranks in the same situation on one line.

Exit status: 0 a suspect is named; 1 an error (no dump found, unreadable arguments);
2 operations are in flight but the dumps name nobody; 3 no dump shows an operation in flight.`,
		Example: `  ncclmerge hang ncclprof-out/
  ncclmerge hang /shared/job42/rank*/ncclprof-out
  ncclmerge hang --format json ncclprof-out/ | jq .suspects`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if !slices.Contains(hang.Formats, format) {
				return fmt.Errorf("--format %q: want text or json", format)
			}
			res, err := analyzeHang(args)
			if err != nil {
				return err
			}
			if err := res.Write(cmd.OutOrStdout(), format); err != nil {
				return err
			}
			return hangStatus(res)
		},
	}
	c.Flags().StringVar(&format, "format", "text", "text or json")
	return c
}

// analyzeHang reads the dumps the arguments name and analyzes them.
func analyzeHang(args []string) (*hang.Result, error) {
	if len(args) == 0 {
		return nil, errors.New("give the directories with the dumps: ncclmerge hang DIR... (the plugin writes ncclprof-hang-<host>-<pid>.json into NCCLPROF_OUTPUT_DIR)")
	}
	in, err := hang.Load(args)
	if err != nil {
		return nil, err
	}
	if len(in.Dumps) == 0 {
		msg := fmt.Sprintf("no hang dump (ncclprof-hang-*.json) in %v", args)
		if len(in.Problems) > 0 {
			msg += fmt.Sprintf("; %d could not be read, the first: %s: %s", len(in.Problems), in.Problems[0].Path, in.Problems[0].Msg)
		}
		return nil, errors.New(msg + ". The plugin writes one per process when an operation has been in flight NCCLPROF_HANG_TIMEOUT_S seconds (default 60), or when ncclprof_dump_inflight() is called")
	}
	return hang.Analyze(in), nil
}

func hangStatus(res *hang.Result) error {
	switch {
	case len(res.Suspects) > 0:
		return nil
	case len(res.Hangs) > 0:
		return exitStatus(hangNoSuspect)
	}
	return exitStatus(hangNothing)
}
