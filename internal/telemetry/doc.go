// Package telemetry exports what the plugin aggregates through the OpenTelemetry Go SDK: one
// measurement per completed NCCL operation into counters and (exponential) histograms, rank-pair
// and channel results with regression latency and bandwidth, and the plugin's own health.
//
// The plugin (drainer/metrics.go) drives a Recorder from its drainer goroutine:
//
//	cfg, problems := telemetry.FromEnv(os.Getenv)    // OTEL_* and NCCLPROF_* variables
//	rec, err := telemetry.New(ctx, telemetry.Options{Config: cfg, Host: telemetry.ProcessHost(v), ...})
//	agg.OnOp = rec.RecordOp                           // every completed operation
//	rec.Pass()                                        // once per drainer pass
//	rec.ObserveResults(agg.Results())                 // when rec.SnapshotDue(now)
//	rec.FinalResult(res)                              // a communicator was finalized
//	rec.FinalFlush()                                  // the last one was: export now (bounded)
//	rec.SetStepLabel(label, tick)                     // ncclprof_set_step from Python
//	rec.SetTraceBytes(func() uint64 { ... })          // the trace writer's byte count
//
// Exporters: OTLP over gRPC or HTTP (configured by the standard OTEL_EXPORTER_OTLP_*
// variables), a Prometheus pull endpoint per rank, OTLP/JSON lines in a file (the default), the
// console, or none. Nothing here runs on NCCL's threads and nothing the drainer calls waits for
// the network, except FinalFlush, which is bounded. A collector that is down or slow costs
// counted, dropped exports and one warning; memory stays bounded.
//
// Every metric is listed in Catalog and documented in docs/metrics.md.
package telemetry
