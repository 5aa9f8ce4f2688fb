package telemetry

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ncclprof/ncclprof/internal/envnum"
	"github.com/ncclprof/ncclprof/internal/outfile"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetricgrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetrichttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/exporters/stdout/stdoutmetric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
)

// grpcMaxReconnect bounds gRPC's reconnect backoff to the collector.
const grpcMaxReconnect = 10 * time.Second

// temporalitySelector maps the standard preference to the SDK's selector.
func temporalitySelector(pref string) sdkmetric.TemporalitySelector {
	switch pref {
	case "delta":
		return sdkmetric.DeltaTemporalitySelector
	case "lowmemory":
		return sdkmetric.LowMemoryTemporalitySelector
	}
	return sdkmetric.CumulativeTemporalitySelector
}

// exportError marks errors the counting exporter has counted already, so the SDK's global
// error handler does not report them a second time.
type exportError struct{ err error }

func (e exportError) Error() string { return e.err.Error() }
func (e exportError) Unwrap() error { return e.err }

// countingExporter counts what fails to export. The SDK keeps no queue: a failed export is
// dropped (the next one carries cumulative totals again), so memory stays bounded whatever
// the collector does.
type countingExporter struct {
	sdkmetric.Exporter
	r *Recorder
}

func (e *countingExporter) Export(ctx context.Context, rm *metricdata.ResourceMetrics) error {
	err := e.Exporter.Export(ctx, rm)
	if err != nil {
		e.r.exportFailed(err, dataPoints(rm))
		return exportError{err}
	}
	e.r.exportOK()
	return nil
}

// ---------------------------------------------------------------------------- file exporter

// fileExporter appends one OTLP/JSON export request per line to a file of its own. The file
// is created on the first export by internal/outfile (a file or symlink already at the name is
// never followed or overwritten: the next free name is taken; mode 0644 less the umask).
type fileExporter struct {
	dir, base   string
	maxSize     int64
	temporality sdkmetric.TemporalitySelector

	mu        sync.Mutex
	f         *os.File
	path      string
	size      int64 // bytes of whole lines in f
	partial   bool  // a failed write left part of a line after size
	rotations uint64
	closed    bool
}

func newFileExporter(dir, base string, maxSize int64, temporality sdkmetric.TemporalitySelector) *fileExporter {
	return &fileExporter{dir: dir, base: base, maxSize: maxSize, temporality: temporality}
}

func (e *fileExporter) Temporality(k sdkmetric.InstrumentKind) metricdata.Temporality {
	return e.temporality(k)
}

func (e *fileExporter) Aggregation(k sdkmetric.InstrumentKind) sdkmetric.Aggregation {
	return sdkmetric.DefaultAggregationSelector(k)
}

// Path is the file written ("" before the first export).
func (e *fileExporter) Path() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.path
}

func (e *fileExporter) open() error {
	f, err := outfile.Create(e.dir, e.base, ".jsonl")
	if err != nil {
		return err
	}
	e.f, e.path = f, f.Name()
	return nil
}

// encodeError is an export that could not be encoded: a bug, not a problem of the disk.
type encodeError struct{ err error }

func (e encodeError) Error() string { return "cannot encode the export: " + e.err.Error() }
func (e encodeError) Unwrap() error { return e.err }

func (e *fileExporter) Export(ctx context.Context, rm *metricdata.ResourceMetrics) error {
	b, err := otlpJSON(rm)
	if err != nil {
		return encodeError{err}
	}
	b = append(b, '\n')
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return errors.New("metrics file exporter is shut down")
	}
	if e.f != nil && e.size > 0 && e.size+int64(len(b)) > e.maxSize/2 {
		if err := e.rotate(); err != nil {
			return err
		}
	}
	if e.f == nil {
		if err := e.open(); err != nil {
			return err
		}
	}
	return e.writeLine(b)
}

// writeLine appends one line, whole or not at all. A short write (the disk is full) is cut back
// off the file, so the file holds only whole lines and the next export does not continue a
// partial one; if cutting back fails, it is tried again before anything else is written.
func (e *fileExporter) writeLine(b []byte) error {
	if e.partial {
		if err := e.cutBack(); err != nil {
			return fmt.Errorf("cannot remove a partly written line from %s: %w", e.path, err)
		}
	}
	n, err := e.f.Write(b) // one write: a line is never interleaved or split by another export
	if err == nil {
		e.size += int64(n)
		return nil
	}
	if n > 0 {
		e.partial = true
		_ = e.cutBack()
	}
	return err
}

// cutBack truncates the file to its last whole line.
func (e *fileExporter) cutBack() error {
	if err := e.f.Truncate(e.size); err != nil {
		return err
	}
	if _, err := e.f.Seek(e.size, io.SeekStart); err != nil {
		return err
	}
	e.partial = false
	return nil
}

// rotate moves the full file to <name>.prev.jsonl (replacing the previous one) and starts the
// name afresh, so the two files together stay under NCCLPROF_METRICS_FILE_MAX_MB for a job of
// any length. Under cumulative temporality (the default) every line holds all totals, so
// rotating loses only older history, never a count.
func (e *fileExporter) rotate() error {
	if e.partial {
		_ = e.cutBack()
	}
	err := e.f.Close()
	e.f, e.size = nil, 0
	if err != nil {
		return err
	}
	name := strings.TrimSuffix(filepath.Base(e.path), ".jsonl")
	// rename replaces whatever is at the target, a planted symlink included, without following it.
	if err := os.Rename(e.path, filepath.Join(filepath.Dir(e.path), name+".prev.jsonl")); err != nil {
		return err
	}
	e.rotations++
	f, err := outfile.Create(e.dir, name, ".jsonl")
	if err != nil {
		return err
	}
	e.f, e.path = f, f.Name()
	return nil
}

// Rotations is how many times the file was rotated.
func (e *fileExporter) Rotations() uint64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.rotations
}

func (e *fileExporter) ForceFlush(context.Context) error { return nil }

func (e *fileExporter) Shutdown(context.Context) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.closed = true
	if e.f != nil {
		err := e.f.Close()
		e.f = nil
		return err
	}
	return nil
}

// fileBase is the metrics file's name without extension: ncclprof-metrics-<host>-<pid>.
func fileBase(host string, pid int) string {
	host = strings.Map(func(r rune) rune {
		if r == '/' || r == 0 || r == '\\' {
			return '_'
		}
		return r
	}, host)
	if host == "" {
		host = "host"
	}
	return fmt.Sprintf("ncclprof-metrics-%s-%d", host, pid)
}

// ---------------------------------------------------------------------------- construction

// newExporter builds the push exporter for the configured kind. The OTLP exporters read
// OTEL_EXPORTER_OTLP_* themselves (endpoint, headers, TLS, timeout, compression, temporality);
// creating them does not connect.
func (r *Recorder) newExporter(ctx context.Context) (sdkmetric.Exporter, error) {
	c := &r.cfg
	switch c.Exporter {
	case ExporterOTLP:
		// Under cumulative temporality (the default) a failed export is not retried: the next
		// one carries the same totals, so a retry would only hold the export goroutine in a
		// backoff. Delta loses increments when an export fails, so there the SDK's retry is kept.
		retry := c.Temporality != "cumulative"
		if c.Protocol == ProtocolGRPC {
			exp, err := otlpmetricgrpc.New(ctx,
				otlpmetricgrpc.WithRetry(otlpmetricgrpc.RetryConfig{Enabled: retry,
					InitialInterval: 5 * time.Second, MaxInterval: 30 * time.Second, MaxElapsedTime: time.Minute}),
				// gRPC's reconnect backoff grows to 2 minutes by default; a collector that comes
				// back is found again within grpcMaxReconnect instead.
				otlpmetricgrpc.WithDialOption(grpc.WithConnectParams(grpc.ConnectParams{
					Backoff: backoff.Config{BaseDelay: time.Second, Multiplier: 1.6, Jitter: 0.2,
						MaxDelay: grpcMaxReconnect}, MinConnectTimeout: 5 * time.Second})))
			if err != nil {
				return nil, fmt.Errorf("cannot create the OTLP gRPC exporter: %w", err)
			}
			return exp, nil
		}
		exp, err := otlpmetrichttp.New(ctx,
			otlpmetrichttp.WithRetry(otlpmetrichttp.RetryConfig{Enabled: retry,
				InitialInterval: 5 * time.Second, MaxInterval: 30 * time.Second, MaxElapsedTime: time.Minute}))
		if err != nil {
			return nil, fmt.Errorf("cannot create the OTLP HTTP exporter: %w", err)
		}
		return exp, nil
	case ExporterFile:
		if r.file == nil {
			r.file = newFileExporter(c.OutputDir, fileBase(r.host.Name, r.host.PID), c.FileMaxSize,
				temporalitySelector(c.Temporality))
		}
		return r.file, nil
	case ExporterConsole:
		return stdoutmetric.New(stdoutmetric.WithTemporalitySelector(temporalitySelector(c.Temporality)))
	}
	return nil, fmt.Errorf("unknown exporter %q", c.Exporter)
}

// ---------------------------------------------------------------------------- push loop

// pusher exports on its own goroutine: every interval it collects from a ManualReader and
// exports, waiting as long as the export takes (at most OTEL_METRIC_EXPORT_TIMEOUT) while the
// plugin goes on. The SDK's PeriodicReader is not used because its ForceFlush queues behind an
// export in progress: with a hung collector the final export at finalize would silently never
// happen. Here the final export collects on the caller's goroutine and exports with a fresh
// OTLP exporter (its own connection), bounded by the caller's deadline, whatever the periodic
// export is doing.
type pusher struct {
	r        *Recorder
	reader   *sdkmetric.ManualReader
	exp      *countingExporter
	interval time.Duration
	timeout  time.Duration
	stop     chan struct{}
	done     chan struct{}
	stopOnce sync.Once
}

// exportTimeout is OTEL_METRIC_EXPORT_TIMEOUT (ms), default 30 s as the SDK has it.
func exportTimeout(getenv Getenv) time.Duration {
	d, _ := envnum.Millis("OTEL_METRIC_EXPORT_TIMEOUT", getenv("OTEL_METRIC_EXPORT_TIMEOUT"), 30000, 1, 3600*1000)
	return d // an invalid value is not said: the SDK's own reading of it warns
}

func (r *Recorder) newPusher(ctx context.Context) (*pusher, error) {
	exp, err := r.newExporter(ctx)
	if err != nil {
		return nil, err
	}
	p := &pusher{r: r, exp: &countingExporter{Exporter: exp, r: r}, interval: r.cfg.Interval,
		timeout: exportTimeout(r.getenv), stop: make(chan struct{}), done: make(chan struct{})}
	p.reader = sdkmetric.NewManualReader(sdkmetric.WithTemporalitySelector(exp.Temporality),
		sdkmetric.WithAggregationSelector(exp.Aggregation))
	return p, nil
}

func (p *pusher) start() { go p.loop() }

func (p *pusher) loop() {
	defer close(p.done)
	t := time.NewTicker(p.interval)
	defer t.Stop()
	for {
		select {
		case <-p.stop:
			return
		case <-t.C:
			ctx, cancel := context.WithTimeout(context.Background(), p.timeout)
			_ = p.export(ctx, p.exp) // counted and reported by the counting exporter
			cancel()
		}
	}
}

func (p *pusher) export(ctx context.Context, exp sdkmetric.Exporter) error {
	var rm metricdata.ResourceMetrics
	if err := p.reader.Collect(ctx, &rm); err != nil {
		return err
	}
	return exp.Export(ctx, &rm)
}

// flush exports now, bounded by ctx's deadline (required). A push exporter that can hang (OTLP)
// is replaced for this export by a fresh one, so an export in progress does not hold it up.
// The outcome is counted once: by the export when it ends in time, else here at the deadline
// (so the failure is reported even if the process exits right after).
func (p *pusher) flush(ctx context.Context) error {
	exp := p.exp.Exporter
	if p.r.cfg.Exporter == ExporterOTLP {
		fresh, err := p.r.newExporter(ctx)
		if err != nil { // counted and warned about like a failed export: nothing went out
			p.r.exportFailed(err, 0)
			return err
		}
		defer func() {
			sctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			_ = fresh.Shutdown(sctx)
			cancel()
		}()
		exp = fresh
	}
	var claimed atomic.Bool
	var points atomic.Uint64
	done := make(chan error, 1)
	go func() {
		var rm metricdata.ResourceMetrics
		err := p.reader.Collect(ctx, &rm)
		if err == nil {
			points.Store(dataPoints(&rm))
			err = exp.Export(ctx, &rm)
		}
		if claimed.CompareAndSwap(false, true) {
			if err != nil {
				p.r.exportFailed(err, points.Load())
			} else {
				p.r.exportOK()
			}
		}
		done <- err
	}()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		if claimed.CompareAndSwap(false, true) {
			p.r.exportFailed(fmt.Errorf("no answer before the deadline (%v)", context.Cause(ctx)), points.Load())
		}
		return ctx.Err()
	}
}

func (p *pusher) shutdown(ctx context.Context) error {
	p.stopOnce.Do(func() { close(p.stop) })
	select {
	case <-p.done:
	case <-ctx.Done():
	}
	err := p.flush(ctx)
	return errors.Join(err, p.exp.Shutdown(ctx))
}

// prometheusReader serves the registry on http://PromAddr:(PromPort+local rank)/metrics.
// Exponential histograms become Prometheus native histograms (scraped with the protobuf
// format); NCCLPROF_METRICS_HISTOGRAM=explicit gives classic buckets.
func (r *Recorder) prometheusReader() (sdkmetric.Reader, error) {
	reg := prometheus.NewRegistry()
	exp, err := otelprom.New(otelprom.WithRegisterer(reg))
	if err != nil {
		return nil, fmt.Errorf("cannot create the Prometheus exporter: %w", err)
	}
	addr := r.cfg.PromListenAddr()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		// Metrics are still collected (bounded by the cardinality limit); nobody can scrape.
		r.warnOnce(&r.warnedListen, fmt.Sprintf("cannot serve Prometheus metrics on %s (%v); set "+
			"NCCLPROF_PROMETHEUS_PORT to a free base port (each local rank adds its LOCAL_RANK). "+
			"The job continues without a metrics endpoint.", addr, err))
		return exp, nil
	}
	r.prom, r.promConns = promServer(reg, ln)
	r.promAddr = ln.Addr().String()
	go func() { _ = r.prom.Serve(r.promConns) }()
	return exp, nil
}
