package telemetry

import (
	"fmt"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/ncclprof/ncclprof/internal/envnum"
)

// Exporter kinds (NCCLPROF_METRICS).
const (
	ExporterFile       = "file"
	ExporterOTLP       = "otlp"
	ExporterPrometheus = "prometheus"
	ExporterConsole    = "console"
	ExporterNone       = "none"
)

// OTLP protocols (OTEL_EXPORTER_OTLP_[METRICS_]PROTOCOL).
const (
	ProtocolGRPC = "grpc"
	ProtocolHTTP = "http/protobuf"
)

// Histogram aggregations.
const (
	HistogramExponential = "exponential"
	HistogramExplicit    = "explicit"
)

// Defaults of the variables this package reads (docs/metrics.md lists them all).
const (
	DefaultInterval       = 10 * time.Second
	DefaultOutputDir      = "ncclprof-out"
	DefaultPrometheusPort = 9464
	DefaultPrometheusAddr = "127.0.0.1"
	DefaultFinalTimeout   = 2 * time.Second
	// DownFinalTimeout caps the final export when the previous export failed: the collector
	// is probably down, so teardown waits for one short attempt only.
	DownFinalTimeout  = 250 * time.Millisecond
	DefaultMaxLabels  = 32
	DefaultFileMaxMiB = 256
	// SnapshotEvery is how often rank-pair and channel results are copied for export.
	SnapshotEvery = time.Second
)

// Config says where and how metrics go. FromEnv builds it from the process environment.
type Config struct {
	Exporter string // file, otlp, prometheus, console or none
	// Protocol is the OTLP protocol (grpc or http/protobuf); Endpoint is the configured OTLP
	// endpoint as given (for messages only: the OTLP exporter reads the OTEL_EXPORTER_OTLP_*
	// variables itself), with any user:password removed.
	Protocol, Endpoint string
	// Interval between exports (push exporters): OTEL_METRIC_EXPORT_INTERVAL, default 10 s.
	Interval  time.Duration
	Histogram string // exponential (default) or explicit (the Prometheus endpoint's default)
	// Temporality for the file and console exporters: cumulative (default), delta or
	// lowmemory (the OTLP exporter reads OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE
	// itself; Prometheus is always cumulative).
	Temporality string
	OutputDir   string // file exporter
	FileMaxSize int64  // bytes; exports that would grow the file past it are dropped
	// Prometheus pull endpoint: PromAddr:(PromPort+LocalRank).
	PromAddr  string
	PromPort  int
	LocalRank int // -1 when unknown
	// FinalTimeout bounds the export done when the last communicator is finalized.
	FinalTimeout time.Duration
	// MaxLabels bounds the distinct step labels; more are reported as "other".
	MaxLabels int
	// Secrets are values (OTLP header values, URL passwords) that must never appear in a
	// message; Redact removes them.
	Secrets []string
}

// Getenv reads one variable ("" when unset).
type Getenv func(string) string

// FromEnv reads the configuration. Problems (values it cannot use) come back as messages
// and the defaults are used for them; they never stop metrics.
func FromEnv(getenv Getenv) (Config, []string) {
	var probs []string
	c := Config{
		Protocol:     ProtocolHTTP,
		Interval:     DefaultInterval,
		Histogram:    HistogramExponential,
		Temporality:  "cumulative",
		OutputDir:    DefaultOutputDir,
		FileMaxSize:  DefaultFileMaxMiB << 20,
		PromAddr:     DefaultPrometheusAddr,
		PromPort:     DefaultPrometheusPort,
		LocalRank:    LocalRank(getenv),
		FinalTimeout: DefaultFinalTimeout,
		MaxLabels:    DefaultMaxLabels,
	}
	c.Exporter, probs = exporterFromEnv(getenv, probs)

	if p := first(getenv, "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"); p != "" {
		switch strings.ToLower(p) {
		case "grpc":
			c.Protocol = ProtocolGRPC
		case "http/protobuf", "http":
			c.Protocol = ProtocolHTTP
		case "http/json":
			probs = append(probs, "OTEL_EXPORTER_OTLP_PROTOCOL=http/json is not supported by the "+
				"OpenTelemetry Go SDK; using http/protobuf (set grpc or http/protobuf to silence this)")
		default:
			probs = append(probs, fmt.Sprintf("OTEL_EXPORTER_OTLP_PROTOCOL=%q is not grpc or "+
				"http/protobuf; using http/protobuf", p))
		}
	}
	if e := first(getenv, "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"); e != "" {
		c.Endpoint = redactURLs(e)
		c.Secrets = append(c.Secrets, urlSecrets(e)...)
		if u, err := url.Parse(e); err == nil && u.RawQuery != "" {
			probs = append(probs, "the OTLP endpoint has a query string, which the OpenTelemetry Go SDK "+
				"does not send; pass an API key as a header instead "+
				"(OTEL_EXPORTER_OTLP_HEADERS=api-key=..., whatever name the collector expects)")
		}
	} else if c.Protocol == ProtocolGRPC {
		c.Endpoint = "https://localhost:4317 (default)"
	} else {
		c.Endpoint = "https://localhost:4318/v1/metrics (default)"
	}
	for _, k := range []string{"OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_METRICS_HEADERS"} {
		c.Secrets = append(c.Secrets, headerValues(getenv(k))...)
	}

	// Numbers: envnum's one rule (finite, in range, else the default and one message).
	num := func(msg string) {
		if msg != "" {
			probs = append(probs, msg)
		}
	}
	var msg string
	c.Interval, msg = envnum.Millis("OTEL_METRIC_EXPORT_INTERVAL", getenv("OTEL_METRIC_EXPORT_INTERVAL"),
		DefaultInterval.Milliseconds(), 1, 24*3600*1000)
	num(msg)

	hist := getenv("NCCLPROF_METRICS_HISTOGRAM")
	histVar := "NCCLPROF_METRICS_HISTOGRAM"
	if hist == "" {
		hist, histVar = getenv("OTEL_EXPORTER_OTLP_METRICS_DEFAULT_HISTOGRAM_AGGREGATION"),
			"OTEL_EXPORTER_OTLP_METRICS_DEFAULT_HISTOGRAM_AGGREGATION"
	}
	switch strings.ToLower(strings.TrimSpace(hist)) {
	case "":
		// A scraper reads exponential histograms only as Prometheus native histograms, which
		// need the protobuf format and a Prometheus that asks for them (3.8+ with
		// scrape_native_histograms); any other sees _count and _sum alone and its quantiles are
		// NaN. Classic buckets work with every scraper, so the endpoint defaults to them.
		if c.Exporter == ExporterPrometheus {
			c.Histogram = HistogramExplicit
		}
	case "exponential", "base2_exponential_bucket_histogram":
		c.Histogram = HistogramExponential
	case "explicit", "explicit_bucket_histogram":
		c.Histogram = HistogramExplicit
	default:
		probs = append(probs, fmt.Sprintf("%s=%q is not exponential (base2_exponential_bucket_histogram) "+
			"or explicit (explicit_bucket_histogram); using exponential", histVar, hist))
	}

	if t := getenv("OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE"); t != "" {
		switch strings.ToLower(strings.TrimSpace(t)) {
		case "cumulative", "delta", "lowmemory":
			c.Temporality = strings.ToLower(strings.TrimSpace(t))
		default:
			probs = append(probs, fmt.Sprintf("OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE=%q is not "+
				"cumulative, delta or lowmemory; using cumulative", t))
		}
	}

	if d := getenv("NCCLPROF_OUTPUT_DIR"); d != "" {
		c.OutputDir = d
	}
	mib, msg := envnum.Int("NCCLPROF_METRICS_FILE_MAX_MB", getenv("NCCLPROF_METRICS_FILE_MAX_MB"),
		DefaultFileMaxMiB, 1, 1<<24)
	c.FileMaxSize = mib << 20
	num(msg)

	if a := first(getenv, "NCCLPROF_PROMETHEUS_ADDR", "OTEL_EXPORTER_PROMETHEUS_HOST"); a != "" {
		c.PromAddr = a
	}
	portVar := "NCCLPROF_PROMETHEUS_PORT"
	p := getenv(portVar)
	if p == "" {
		portVar = "OTEL_EXPORTER_PROMETHEUS_PORT"
		p = getenv(portVar)
	}
	if p != "" {
		if n, err := strconv.Atoi(strings.TrimSpace(p)); err == nil && n > 0 && n < 65536 {
			c.PromPort = n
		} else {
			probs = append(probs, fmt.Sprintf("%s=%q is not a port number; using %d", portVar, p,
				DefaultPrometheusPort))
		}
	}

	c.FinalTimeout, msg = envnum.Millis("NCCLPROF_METRICS_FINAL_TIMEOUT_MS", getenv("NCCLPROF_METRICS_FINAL_TIMEOUT_MS"),
		DefaultFinalTimeout.Milliseconds(), 0, 600000)
	num(msg)
	labels, msg := envnum.Int("NCCLPROF_METRICS_MAX_LABELS", getenv("NCCLPROF_METRICS_MAX_LABELS"),
		DefaultMaxLabels, 0, 1<<20)
	c.MaxLabels = int(labels)
	num(msg)
	return c, probs
}

// exporterFromEnv picks the exporter: NCCLPROF_METRICS, else the standard
// OTEL_METRICS_EXPORTER, else otlp when an OTLP endpoint is configured, else the file.
// OTEL_SDK_DISABLED=true turns metrics off.
func exporterFromEnv(getenv Getenv, probs []string) (string, []string) {
	if strings.EqualFold(strings.TrimSpace(getenv("OTEL_SDK_DISABLED")), "true") {
		return ExporterNone, probs
	}
	if v := strings.ToLower(strings.TrimSpace(getenv("NCCLPROF_METRICS"))); v != "" {
		switch v {
		case ExporterFile, ExporterOTLP, ExporterPrometheus, ExporterConsole, ExporterNone:
			return v, probs
		case "0", "off", "false":
			return ExporterNone, probs
		}
		return ExporterFile, append(probs, fmt.Sprintf("NCCLPROF_METRICS=%q is not one of file, "+
			"otlp, prometheus, console, none; writing metrics to a file", v))
	}
	if v := strings.ToLower(strings.TrimSpace(getenv("OTEL_METRICS_EXPORTER"))); v != "" {
		// The standard variable may list several; the first one we know wins.
		for _, e := range strings.Split(v, ",") {
			switch e = strings.TrimSpace(e); e {
			case ExporterOTLP, ExporterPrometheus, ExporterConsole, ExporterNone:
				return e, probs
			}
		}
		probs = append(probs, fmt.Sprintf("OTEL_METRICS_EXPORTER=%q names no exporter ncclprof has "+
			"(otlp, prometheus, console, none); set NCCLPROF_METRICS", v))
	}
	if first(getenv, "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT") != "" {
		return ExporterOTLP, probs
	}
	return ExporterFile, probs
}

// LocalRank is the process's rank on its node as launchers set it (torchrun, Open MPI,
// MPICH/Hydra, Slurm), or -1.
func LocalRank(getenv Getenv) int {
	for _, k := range []string{"LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID",
		"PMI_LOCAL_RANK", "SLURM_LOCALID"} {
		if n, err := strconv.Atoi(strings.TrimSpace(getenv(k))); err == nil && n >= 0 {
			return n
		}
	}
	return -1
}

func first(getenv Getenv, keys ...string) string {
	for _, k := range keys {
		if v := strings.TrimSpace(getenv(k)); v != "" {
			return v
		}
	}
	return ""
}

// headerValues returns the values of an OTEL_EXPORTER_OTLP_HEADERS list (k=v,k2=v2), both as
// given and URL-decoded, so messages can be scrubbed of them.
func headerValues(s string) []string {
	var out []string
	for _, kv := range strings.Split(s, ",") {
		_, v, ok := strings.Cut(kv, "=")
		if !ok {
			continue
		}
		if v = strings.TrimSpace(v); v == "" {
			continue
		}
		out = append(out, v)
		if d, err := url.PathUnescape(v); err == nil && d != v {
			out = append(out, d)
		}
		// A bearer token is often printed without its scheme.
		if _, tok, ok := strings.Cut(v, " "); ok && len(tok) >= 4 {
			out = append(out, tok)
		}
		if d, err := url.PathUnescape(v); err == nil {
			if _, tok, ok := strings.Cut(d, " "); ok && len(tok) >= 4 {
				out = append(out, tok)
			}
		}
	}
	return out
}

// Redacted stands where a secret was removed from a message.
const Redacted = "[redacted]"

// Redact removes every secret from a message: the configured ones, and the user info and query
// string of every URL in it (an API key often travels as ?api_key=... or user:token@).
func (c *Config) Redact(msg string) string {
	for _, s := range c.Secrets {
		if len(s) >= 3 {
			msg = strings.ReplaceAll(msg, s, Redacted)
		}
	}
	return redactURLs(msg)
}

// urlInText finds URLs in running text: a scheme, then everything up to a space or a quote.
var urlInText = regexp.MustCompile(`[A-Za-z][A-Za-z0-9+.-]*://[^\s"'<>]+`)

// redactURLs removes the user info and the query string of every URL in s.
func redactURLs(s string) string {
	return urlInText.ReplaceAllStringFunc(s, func(u string) string {
		scheme, rest, _ := strings.Cut(u, "://")
		host, path := rest, ""
		if i := strings.IndexAny(rest, "/?#"); i >= 0 {
			host, path = rest[:i], rest[i:]
		}
		if i := strings.LastIndexByte(host, '@'); i >= 0 {
			host = Redacted + "@" + host[i+1:]
		}
		if i := strings.IndexByte(path, '?'); i >= 0 {
			path = path[:i+1] + Redacted
		}
		return scheme + "://" + host + path
	})
}

// urlSecrets are the parts of an endpoint URL that must never be printed, also outside the URL
// itself (an exporter may quote them): the password and the query's values, as given and decoded.
func urlSecrets(raw string) []string {
	u, err := url.Parse(raw)
	if err != nil {
		return nil
	}
	var out []string
	if pw, ok := u.User.Password(); ok && pw != "" {
		out = append(out, pw)
	}
	for _, kv := range strings.Split(u.RawQuery, "&") {
		if _, v, ok := strings.Cut(kv, "="); ok && v != "" {
			out = append(out, v)
			if d, err := url.QueryUnescape(v); err == nil && d != v {
				out = append(out, d)
			}
		}
	}
	return out
}

// PromListenAddr is where the Prometheus endpoint listens: the base port plus the local rank,
// so every rank on a node has its own port.
func (c *Config) PromListenAddr() string {
	port := c.PromPort
	if c.LocalRank > 0 {
		port += c.LocalRank
	}
	host := c.PromAddr
	if strings.Contains(host, ":") && !strings.HasPrefix(host, "[") {
		host = "[" + host + "]" // IPv6
	}
	return host + ":" + strconv.Itoa(port)
}

// Describe is a one-line description of the configuration without secrets, for messages.
func (c *Config) Describe() string {
	switch c.Exporter {
	case ExporterOTLP:
		return fmt.Sprintf("OTLP %s to %s every %v", c.Protocol, c.Endpoint, c.Interval)
	case ExporterPrometheus:
		return fmt.Sprintf("Prometheus endpoint http://%s/metrics", c.PromListenAddr())
	case ExporterFile:
		return fmt.Sprintf("OTLP JSON lines in %s every %v", c.OutputDir, c.Interval)
	case ExporterConsole:
		return fmt.Sprintf("console (stdout) every %v", c.Interval)
	}
	return "metrics off"
}
