package main

import (
	"encoding/json"
	"fmt"
	"os"

	"github.com/ncclprof/ncclprof/internal/tracecheck"
	"github.com/spf13/cobra"
)

func checkCmd() *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "check TRACE...",
		Short: "Tell what Perfetto's JSON importer would do with a trace",
		Long: `Check traces (.json or .json.gz) against the rules of Perfetto's JSON importer.

Errors (exit status 1): invalid JSON, events missing required fields, flows with no end
(Perfetto draws nothing) or with duplicate ids (Perfetto drops the second).
Warnings: slices that do not nest on their track (Perfetto moves them to an overflow track),
tid 0 (shown as the process's main thread; not on process-scoped instants, which have no thread),
time going backwards (negative ts or dur, an E before its B, a flow ending before it starts).
Info: normal in real traces, such as Kineto's flow ends with no start.`,
		Example: "  ncclmerge check merged.json.gz\n  ncclmerge check --json rank*.json",
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return fmt.Errorf("give the traces to check: ncclmerge check TRACE... (.json or .json.gz; see --help)")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			failed := false
			var reports []*tracecheck.Report
			for _, path := range args {
				r, err := tracecheck.File(path)
				if err != nil {
					return err
				}
				failed = failed || !r.OK()
				if asJSON {
					reports = append(reports, r)
				} else {
					r.WriteText(os.Stdout)
				}
			}
			if asJSON {
				enc := json.NewEncoder(os.Stdout)
				enc.SetIndent("", "  ")
				if err := enc.Encode(reports); err != nil {
					return err
				}
			}
			if failed {
				fmt.Fprintln(os.Stderr, "ncclmerge check: errors found: Perfetto would drop or misread part of the trace")
				return errReported
			}
			return nil
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print the reports as JSON")
	return c
}
