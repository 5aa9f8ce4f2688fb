package telemetry

import (
	"strings"
	"testing"
	"time"
)

func envOf(kv ...string) Getenv {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) string { return m[k] }
}

func TestConfigDefaults(t *testing.T) {
	c, probs := FromEnv(envOf())
	if len(probs) != 0 {
		t.Errorf("problems with an empty environment: %v", probs)
	}
	want := Config{Exporter: ExporterFile, Protocol: ProtocolHTTP, Interval: 10 * time.Second,
		Histogram: HistogramExponential, Temporality: "cumulative", OutputDir: "ncclprof-out",
		FileMaxSize: 256 << 20, PromAddr: "127.0.0.1", PromPort: 9464, LocalRank: -1,
		FinalTimeout: 2 * time.Second, MaxLabels: 32,
		Endpoint: "https://localhost:4318/v1/metrics (default)"}
	if c.Exporter != want.Exporter || c.Protocol != want.Protocol || c.Interval != want.Interval ||
		c.Histogram != want.Histogram || c.Temporality != want.Temporality || c.OutputDir != want.OutputDir ||
		c.FileMaxSize != want.FileMaxSize || c.PromListenAddr() != "127.0.0.1:9464" || c.LocalRank != -1 ||
		c.FinalTimeout != want.FinalTimeout || c.MaxLabels != want.MaxLabels || c.Endpoint != want.Endpoint {
		t.Errorf("defaults:\n got %+v\nwant %+v", c, want)
	}
}

func TestConfigExporterChoice(t *testing.T) {
	for _, tc := range []struct {
		env      []string
		want     string
		problems int
	}{
		{nil, ExporterFile, 0},
		{[]string{"OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318"}, ExporterOTLP, 0},
		{[]string{"OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "http://collector:4318/v1/metrics"}, ExporterOTLP, 0},
		{[]string{"NCCLPROF_METRICS", "none", "OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"}, ExporterNone, 0},
		{[]string{"NCCLPROF_METRICS", "Prometheus"}, ExporterPrometheus, 0},
		{[]string{"NCCLPROF_METRICS", "0"}, ExporterNone, 0},
		{[]string{"NCCLPROF_METRICS", "bogus"}, ExporterFile, 1},
		{[]string{"OTEL_METRICS_EXPORTER", "prometheus,otlp"}, ExporterPrometheus, 0},
		{[]string{"OTEL_METRICS_EXPORTER", "console"}, ExporterConsole, 0},
		{[]string{"OTEL_METRICS_EXPORTER", "zipkin"}, ExporterFile, 1},
		{[]string{"OTEL_METRICS_EXPORTER", "none", "OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"}, ExporterNone, 0},
		{[]string{"NCCLPROF_METRICS", "otlp", "OTEL_METRICS_EXPORTER", "none"}, ExporterOTLP, 0},
		{[]string{"OTEL_SDK_DISABLED", "true", "NCCLPROF_METRICS", "otlp"}, ExporterNone, 0},
	} {
		c, probs := FromEnv(envOf(tc.env...))
		if c.Exporter != tc.want || len(probs) != tc.problems {
			t.Errorf("%v: exporter %q with %d problems %v; want %q with %d", tc.env, c.Exporter, len(probs), probs, tc.want, tc.problems)
		}
	}
}

func TestConfigValues(t *testing.T) {
	c, probs := FromEnv(envOf(
		"OTEL_EXPORTER_OTLP_PROTOCOL", "grpc",
		"OTEL_EXPORTER_OTLP_ENDPOINT", "https://alice:pa55word@collector.example:4317",
		"OTEL_EXPORTER_OTLP_HEADERS", "authorization=Bearer%20tok3n-value,x-api-key=k3y-value",
		"OTEL_METRIC_EXPORT_INTERVAL", "2500",
		"OTEL_EXPORTER_OTLP_METRICS_DEFAULT_HISTOGRAM_AGGREGATION", "explicit_bucket_histogram",
		"OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE", "Delta",
		"NCCLPROF_OUTPUT_DIR", "/scratch/out",
		"NCCLPROF_METRICS_FILE_MAX_MB", "8",
		"NCCLPROF_METRICS_FINAL_TIMEOUT_MS", "750",
		"NCCLPROF_METRICS_MAX_LABELS", "4",
		"OTEL_EXPORTER_PROMETHEUS_HOST", "0.0.0.0",
		"OTEL_EXPORTER_PROMETHEUS_PORT", "9000",
		"LOCAL_RANK", "3",
	))
	if len(probs) != 0 {
		t.Errorf("problems: %v", probs)
	}
	if c.Exporter != ExporterOTLP || c.Protocol != ProtocolGRPC || c.Interval != 2500*time.Millisecond ||
		c.Histogram != HistogramExplicit || c.Temporality != "delta" || c.OutputDir != "/scratch/out" ||
		c.FileMaxSize != 8<<20 || c.FinalTimeout != 750*time.Millisecond || c.MaxLabels != 4 ||
		c.LocalRank != 3 || c.PromListenAddr() != "0.0.0.0:9003" {
		t.Errorf("config %+v (listen %s)", c, c.PromListenAddr())
	}
	// The password is gone from the endpoint; secrets never reach a message.
	if c.Endpoint != "https://[redacted]@collector.example:4317" {
		t.Errorf("endpoint shown as %q", c.Endpoint)
	}
	msg := c.Redact("POST https://alice:pa55word@collector.example failed with header Bearer tok3n-value " +
		"(Bearer%20tok3n-value) and k3y-value; " + c.Describe())
	for _, secret := range []string{"pa55word", "tok3n-value", "k3y-value"} {
		if strings.Contains(msg, secret) {
			t.Errorf("secret %q survives redaction: %s", secret, msg)
		}
	}
	// NCCLPROF_* take precedence over the standard Prometheus variables; IPv6 is bracketed.
	c, _ = FromEnv(envOf("NCCLPROF_PROMETHEUS_ADDR", "::1", "NCCLPROF_PROMETHEUS_PORT", "9500",
		"OTEL_EXPORTER_PROMETHEUS_PORT", "9000", "OMPI_COMM_WORLD_LOCAL_RANK", "1"))
	if c.PromListenAddr() != "[::1]:9501" {
		t.Errorf("listen %s, want [::1]:9501", c.PromListenAddr())
	}
	// The Prometheus endpoint defaults to classic buckets (every scraper reads them); asked
	// for, it serves exponential ones as native histograms.
	c, _ = FromEnv(envOf("NCCLPROF_METRICS", "prometheus"))
	if c.Histogram != HistogramExplicit {
		t.Errorf("Prometheus endpoint: histogram %s by default, want explicit", c.Histogram)
	}
	c, _ = FromEnv(envOf("NCCLPROF_METRICS", "prometheus", "NCCLPROF_METRICS_HISTOGRAM", "exponential"))
	if c.Histogram != HistogramExponential {
		t.Errorf("Prometheus endpoint asked for exponential: %s", c.Histogram)
	}
	// NCCLPROF_METRICS_HISTOGRAM wins over the OTLP variable.
	c, _ = FromEnv(envOf("NCCLPROF_METRICS_HISTOGRAM", "exponential",
		"OTEL_EXPORTER_OTLP_METRICS_DEFAULT_HISTOGRAM_AGGREGATION", "explicit_bucket_histogram"))
	if c.Histogram != HistogramExponential {
		t.Errorf("histogram %s", c.Histogram)
	}
}

func TestConfigProblems(t *testing.T) {
	c, probs := FromEnv(envOf(
		"OTEL_EXPORTER_OTLP_PROTOCOL", "http/json",
		"OTEL_METRIC_EXPORT_INTERVAL", "soon",
		"NCCLPROF_METRICS_HISTOGRAM", "linear",
		"OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE", "sometimes",
		"NCCLPROF_METRICS_FILE_MAX_MB", "-1",
		"NCCLPROF_PROMETHEUS_PORT", "70000",
		"NCCLPROF_METRICS_FINAL_TIMEOUT_MS", "x",
		"NCCLPROF_METRICS_MAX_LABELS", "many",
	))
	if len(probs) != 8 {
		t.Errorf("want 8 problems, got %d: %q", len(probs), probs)
	}
	// Each problem names its variable and what is used instead; defaults stay.
	for _, p := range probs {
		if !strings.Contains(p, "=") || !strings.Contains(p, "using") {
			t.Errorf("unclear problem message: %q", p)
		}
	}
	if c.Protocol != ProtocolHTTP || c.Interval != DefaultInterval || c.Histogram != HistogramExponential ||
		c.Temporality != "cumulative" || c.FileMaxSize != DefaultFileMaxMiB<<20 || c.PromPort != DefaultPrometheusPort ||
		c.FinalTimeout != DefaultFinalTimeout || c.MaxLabels != DefaultMaxLabels {
		t.Errorf("defaults not kept: %+v", c)
	}
}

func TestLocalRank(t *testing.T) {
	for _, tc := range []struct {
		env  []string
		want int
	}{
		{nil, -1},
		{[]string{"LOCAL_RANK", "5"}, 5},
		{[]string{"SLURM_LOCALID", "2"}, 2},
		{[]string{"LOCAL_RANK", "1", "SLURM_LOCALID", "2"}, 1},
		{[]string{"MPI_LOCALRANKID", "7"}, 7},
		{[]string{"LOCAL_RANK", "x"}, -1},
	} {
		if got := LocalRank(envOf(tc.env...)); got != tc.want {
			t.Errorf("%v: local rank %d, want %d", tc.env, got, tc.want)
		}
	}
}

// TestRedactQueryAndUserinfo: an API key in the endpoint's query string or user info never
// reaches a message, however the message quotes the URL (issue 14 item 12).
func TestRedactQueryAndUserinfo(t *testing.T) {
	c, probs := FromEnv(envOf("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
		"https://t0ken-user@collector.example:4318/v1/metrics?api_key=qu3ry%2Fs3cret&tenant=acme-ml"))
	if c.Endpoint != "https://[redacted]@collector.example:4318/v1/metrics?[redacted]" {
		t.Errorf("endpoint shown as %q", c.Endpoint)
	}
	if len(probs) != 1 || !strings.Contains(probs[0], "OTEL_EXPORTER_OTLP_HEADERS") || strings.Contains(probs[0], "qu3ry") {
		t.Errorf("want one problem saying the query is not sent and to use a header, got %q", probs)
	}
	for _, msg := range []string{
		c.Describe(),
		`Post "https://t0ken-user@collector.example:4318/v1/metrics?api_key=qu3ry%2Fs3cret&tenant=acme-ml": EOF`,
		"export to grpc://u:p4ss@h:4317?api_key=qu3ry%2Fs3cret failed",
		"the collector said: bad api_key qu3ry/s3cret for tenant acme-ml",
		"see http://docs.example/page?token=an0ther-key#frag (and a plain sentence)",
	} {
		got := c.Redact(msg)
		for _, secret := range []string{"t0ken-user", "qu3ry", "s3cret", "acme-ml", "p4ss", "an0ther-key"} {
			if strings.Contains(got, secret) {
				t.Errorf("Redact(%q) = %q still shows %q", msg, got, secret)
			}
		}
		if !strings.Contains(got, "[redacted]") {
			t.Errorf("Redact(%q) = %q: nothing marked as redacted", msg, got)
		}
	}
	// What is not secret stays readable.
	if got := c.Redact("see http://docs.example/page?token=x (and a plain sentence)"); got !=
		"see http://docs.example/page?[redacted] (and a plain sentence)" {
		t.Errorf("got %q", got)
	}
}

// Numbers that parse but are out of any sensible range (issue 23, item 13): a millisecond count
// that overflows time.Duration wrapped negative (a ticker that panics, a deadline already past),
// and a label bound of 2^62 sized nothing. Each is refused with one message and the default.
func TestConfigNumbersOutOfRange(t *testing.T) {
	c, probs := FromEnv(envOf(
		"OTEL_METRIC_EXPORT_INTERVAL", "10000000000000",
		"NCCLPROF_METRICS_FINAL_TIMEOUT_MS", "9223372036854775807",
		"NCCLPROF_METRICS_MAX_LABELS", "4611686018427387904",
		"NCCLPROF_METRICS_FILE_MAX_MB", "NaN",
	))
	if len(probs) != 4 {
		t.Errorf("want 4 problems, got %d: %q", len(probs), probs)
	}
	if c.Interval != DefaultInterval || c.FinalTimeout != DefaultFinalTimeout || c.MaxLabels != DefaultMaxLabels ||
		c.FileMaxSize != DefaultFileMaxMiB<<20 {
		t.Errorf("defaults not kept: interval %v final %v labels %d file %d", c.Interval, c.FinalTimeout, c.MaxLabels, c.FileMaxSize)
	}
	if d := exportTimeout(envOf("OTEL_METRIC_EXPORT_TIMEOUT", "10000000000000")); d != 30*time.Second {
		t.Errorf("export timeout %v, want the default 30s", d)
	}
}
