package telemetry

// Attribute keys on data points. The Prometheus form replaces dots with underscores
// (nccl.comm.hash → nccl_comm_hash).
const (
	AttrCommHash  = "nccl.comm.hash" // "0x" + 16 hex digits, the same on every rank
	AttrCommName  = "nccl.comm.name" // NCCL's communicator name, when it has one
	AttrRank      = "nccl.rank"      // this rank in the communicator (the sender for pairs)
	AttrNRanks    = "nccl.nranks"
	AttrNNodes    = "nccl.nnodes"
	AttrOp        = "nccl.op"        // AllReduce, Send, AlltoAll, ...
	AttrAlgo      = "nccl.algo"      // RING, TREE, ... (absent for point-to-point)
	AttrProto     = "nccl.proto"     // SIMPLE, LL, LL128 (absent for point-to-point)
	AttrNChannels = "nccl.nchannels" // channels NCCL used for the operation
	// AttrAPIOnly is true on operations NCCL reported only by API events (no Coll: symmetric
	// kernels, CE collectives; docs/nccl-api-patterns.md); absent otherwise.
	AttrAPIOnly   = "ncclprof.api_only"
	AttrPeer      = "nccl.peer" // the receiving rank of a rank pair
	AttrChannel   = "nccl.channel"
	AttrStep      = "ncclprof.step" // the step label the training script set
	AttrFit       = "ncclprof.fit"  // min or avg: which regression (see docs/metrics.md)
	AttrReason    = "ncclprof.reason"
	AttrKind      = "ncclprof.kind"
	AttrEventType = "ncclprof.event_type" // Coll, ProxyStep, ...: the NCCL event type dropped
	AttrExporter  = "ncclprof.exporter"
	// AttrDirection tells sent from received bytes and transfers of a rank pair, as
	// OpenTelemetry's semantic conventions do for network traffic (transmit, receive).
	AttrDirection = "network.io.direction"
)

// Values of AttrDirection.
const (
	DirTransmit = "transmit"
	DirReceive  = "receive"
)

// Instrument kinds as the catalogue names them.
const (
	KindCounter           = "Counter"
	KindHistogram         = "Histogram"
	KindObservableCounter = "ObservableCounter"
	KindObservableGauge   = "ObservableGauge"
)

// Def documents one exported metric. docs/metrics.md is written from (and tested against)
// this table.
type Def struct {
	Name       string // OpenTelemetry name
	Kind       string
	Unit       string // UCUM, as exported
	Prometheus string // the name Prometheus shows (OpenTelemetry's translation with suffixes)
	Attrs      string // attribute group: op, pair, channel, comm, process
	Desc       string
}

// Attribute groups.
const (
	attrsOp      = "op"      // comm + nccl.op, nccl.algo, nccl.proto, nccl.nchannels, ncclprof.step
	attrsPair    = "pair"    // comm + nccl.peer (+ network.io.direction or ncclprof.fit)
	attrsChannel = "channel" // comm + nccl.channel (+ ncclprof.fit on the fit gauges)
	attrsComm    = "comm"    // nccl.comm.hash, nccl.comm.name, nccl.rank, nccl.nranks, nccl.nnodes
	attrsProcess = "process" // resource attributes only
)

// Names of the metrics.
const (
	MOps              = "ncclprof.ops"
	MOpIO             = "ncclprof.op.io"
	MOpIncomplete     = "ncclprof.op.incomplete"
	MOpTransfers      = "ncclprof.op.transfers"
	MOpTransferBytes  = "ncclprof.op.transfer.bytes"
	MOpSize           = "ncclprof.op.size"
	MOpCompletion     = "ncclprof.op.completion.duration"
	MOpEnqueue        = "ncclprof.op.enqueue.duration"
	MOpGPU            = "ncclprof.op.gpu.duration"
	MOpAPI            = "ncclprof.op.api.duration"
	MOpTransferSize   = "ncclprof.op.transfer.size"
	MOpTransferTime   = "ncclprof.op.transfer.duration"
	MOpAlgBW          = "ncclprof.op.algbw"
	MOpBusBW          = "ncclprof.op.busbw"
	MPairIO           = "ncclprof.pair.io"
	MPairTransfers    = "ncclprof.pair.transfers"
	MPairLatency      = "ncclprof.pair.latency"
	MPairBandwidth    = "ncclprof.pair.bandwidth"
	MPairR2           = "ncclprof.pair.fit.r2"
	MChanTransfers    = "ncclprof.channel.transfers"
	MChanIO           = "ncclprof.channel.io"
	MChanTime         = "ncclprof.channel.transfer.time"
	MChanLatency      = "ncclprof.channel.latency"
	MChanBandwidth    = "ncclprof.channel.bandwidth"
	MChanR2           = "ncclprof.channel.fit.r2"
	MCommEvents       = "ncclprof.comm.events"
	MCommIssues       = "ncclprof.comm.issues"
	MEvents           = "ncclprof.events"
	MEventsDropped    = "ncclprof.events.dropped"
	MWindows          = "ncclprof.windows"
	MConditions       = "ncclprof.plugin.conditions"
	MExportFailures   = "ncclprof.export.failures"
	MExportDropped    = "ncclprof.export.dropped_points"
	MTraceIO          = "ncclprof.trace.io"
	MLabelsOverflowed = "ncclprof.step_labels.overflow"
	MOpSamplesDropped = "ncclprof.op.samples_dropped"
)

// Catalog lists every metric ncclprof exports.
var Catalog = []Def{
	// Per operation: one measurement per completed NCCL operation.
	{MOps, KindCounter, "{operation}", "ncclprof_ops_total", attrsOp,
		"Completed operations (collectives, point-to-point operations, rebuilt AlltoAll/Gather/Scatter)."},
	{MOpIO, KindCounter, "By", "ncclprof_op_io_bytes_total", attrsOp,
		"Operation size as nccl-tests defines it: count × datatype size, × nranks for AllGather, ReduceScatter and AlltoAll."},
	{MOpIncomplete, KindCounter, "{operation}", "ncclprof_op_incomplete_total", attrsOp,
		"Operations completed with children still open (given up after the aggregation's age limit); their times are lower bounds."},
	{MOpTransfers, KindCounter, "{transfer}", "ncclprof_op_transfers_total", attrsOp,
		"Network transfers (send ProxySteps that reached the network) of the operations."},
	{MOpTransferBytes, KindCounter, "By", "ncclprof_op_transfer_bytes_total", attrsOp,
		"Bytes of those transfers."},
	{MOpSize, KindHistogram, "By", "ncclprof_op_size_bytes", attrsOp,
		"Per-operation size (the value ncclprof.op.io adds up)."},
	{MOpCompletion, KindHistogram, "s", "ncclprof_op_completion_duration_seconds", attrsOp,
		"Per-operation completion time: NCCL's Coll/P2p start to the stop of its last ProxyOp or KernelCh child. Operations without children (intra-node without KernelCh, self send/recv) have none."},
	{MOpEnqueue, KindHistogram, "s", "ncclprof_op_enqueue_duration_seconds", attrsOp,
		"Per-operation enqueue time: NCCL's Coll/P2p start to its stop, i.e. the host-side work of queueing it, not its execution."},
	{MOpGPU, KindHistogram, "s", "ncclprof_op_gpu_duration_seconds", attrsOp,
		"Per-operation GPU time: first KernelCh GPU start to last KernelCh GPU stop (GPU globaltimer). Only with KernelCh events enabled."},
	{MOpAPI, KindHistogram, "s", "ncclprof_op_api_duration_seconds", attrsOp,
		"Per-operation API time: time inside the NCCL API call (CollApi/P2pApi start to stop; NCCL 2.28+, profiler ABI v5+)."},
	{MOpTransferSize, KindHistogram, "By", "ncclprof_op_transfer_size_bytes", attrsOp,
		"Per operation, the mean size of its network transfers."},
	{MOpTransferTime, KindHistogram, "s", "ncclprof_op_transfer_duration_seconds", attrsOp,
		"Per operation, the mean time of its network transfers: ProxyStep SendWait state to the step's stop."},
	{MOpAlgBW, KindHistogram, "By/s", "ncclprof_op_algbw_bytes_per_second", attrsOp,
		"Per-operation algorithm bandwidth as nccl-tests defines it: size / time, time being the completion time (the GPU time when there is none)."},
	{MOpBusBW, KindHistogram, "By/s", "ncclprof_op_busbw_bytes_per_second", attrsOp,
		"Per-operation bus bandwidth as nccl-tests defines it: algbw × 2(n−1)/n for AllReduce, × (n−1)/n for AllGather, ReduceScatter and AlltoAll, × 1 otherwise."},
	// Per rank pair: cumulative over the communicator's life, sampled at export.
	{MPairIO, KindObservableCounter, "By", "ncclprof_pair_io_bytes_total", attrsPair,
		"Bytes this rank exchanged with the peer over the network, by network.io.direction: transmit (send ProxySteps) or receive (receive ProxySteps)."},
	{MPairTransfers, KindObservableCounter, "{transfer}", "ncclprof_pair_transfers_total", attrsPair,
		"Network transfers between this rank and the peer, by network.io.direction (transmit, receive)."},
	{MPairLatency, KindObservableGauge, "s", "ncclprof_pair_latency_seconds", attrsPair,
		"Latency to the peer: intercept of the fit time = latency + size/bandwidth over the send transfers. Only while the fit is trusted."},
	{MPairBandwidth, KindObservableGauge, "By/s", "ncclprof_pair_bandwidth_bytes_per_second", attrsPair,
		"Bandwidth to the peer: 1/slope of the same fit. Only while the fit is trusted."},
	{MPairR2, KindObservableGauge, "1", "ncclprof_pair_fit_r2_ratio", attrsPair,
		"R² of the fit (only while the fit is trusted: R² ≥ 0.8, ≥ 3 distinct sizes, ≥ 8 points, positive slope)."},
	// Per channel.
	{MChanTransfers, KindObservableCounter, "{transfer}", "ncclprof_channel_transfers_total", attrsChannel,
		"Network send transfers on the channel."},
	{MChanIO, KindObservableCounter, "By", "ncclprof_channel_io_bytes_total", attrsChannel,
		"Bytes of those transfers (rate(io)/rate(transfers) is the mean transfer size over any interval)."},
	{MChanTime, KindObservableCounter, "s", "ncclprof_channel_transfer_time_seconds_total", attrsChannel,
		"Summed transfer time (SendWait to stop) of those transfers (rate(time)/rate(transfers) is the mean transfer time)."},
	{MChanLatency, KindObservableGauge, "s", "ncclprof_channel_latency_seconds", attrsChannel,
		"Latency of the channel's transfers (fit intercept, all its peers together). Only while the fit is trusted."},
	{MChanBandwidth, KindObservableGauge, "By/s", "ncclprof_channel_bandwidth_bytes_per_second", attrsChannel,
		"Bandwidth of the channel's transfers (1/slope of the fit). Only while the fit is trusted."},
	{MChanR2, KindObservableGauge, "1", "ncclprof_channel_fit_r2_ratio", attrsChannel,
		"R² of the channel fit (only while trusted)."},
	// Per communicator: aggregation health.
	{MCommEvents, KindObservableCounter, "{event}", "ncclprof_comm_events_total", attrsComm,
		"Events of this communicator that were aggregated."},
	{MCommIssues, KindObservableCounter, "{event}", "ncclprof_comm_issues_total", attrsComm,
		"Events the aggregation could not use, by ncclprof.kind: orphan_steps, orphan_proxyops, orphan_kernelch, late_unmatched, expired, foreign_pxn."},
	// The plugin's own health, per process.
	{MEvents, KindObservableCounter, "{event}", "ncclprof_events_total", attrsProcess,
		"Events the plugin recorded (all communicators)."},
	{MEventsDropped, KindObservableCounter, "{event}", "ncclprof_events_dropped_total", attrsProcess,
		"Events dropped, by ncclprof.reason and ncclprof.event_type: windows_full (not tracked: every window or in-flight cell of a communicator busy, the drainer fell behind; a Coll or P2p still counts with its bytes, untimed), trace_detail (a record the trace wanted, the detail windows full: the trace is partial, the figures are not) or too_many_threads (more recording threads than the plugin has slots for)."},
	{MWindows, KindObservableCounter, "{window}", "ncclprof_windows_total", attrsProcess,
		"Event windows sealed and processed."},
	{MConditions, KindObservableCounter, "{event}", "ncclprof_plugin_conditions_total", attrsProcess,
		"Other plugin counters, by ncclprof.kind (null_handle, stale_handle, late_records, quiesce_timeouts, ...; see docs/metrics.md)."},
	{MExportFailures, KindObservableCounter, "{export}", "ncclprof_export_failures_total", attrsProcess,
		"Exports that failed (collector down, slow, refused; file full), by ncclprof.exporter. Reported by the next export that succeeds."},
	{MExportDropped, KindObservableCounter, "{datapoint}", "ncclprof_export_dropped_points_total", attrsProcess,
		"Data points in the exports that failed."},
	{MTraceIO, KindObservableCounter, "By", "ncclprof_trace_io_bytes_total", attrsProcess,
		"Bytes the trace writer has written (0 until a trace writer reports)."},
	{MOpSamplesDropped, KindObservableCounter, "{operation}", "ncclprof_op_samples_dropped_total", attrsProcess,
		"Operations whose histogram values were skipped because recording could not keep up (the per-operation counters stay exact)."},
	{MLabelsOverflowed, KindObservableCounter, "{label}", "ncclprof_step_labels_overflow_total", attrsProcess,
		"Step labels reported as \"other\" because NCCLPROF_METRICS_MAX_LABELS distinct labels were seen already."},
}
