package kineto

import (
	"bytes"
	"compress/gzip"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ncclprof/ncclprof/internal/testtraces"
	"github.com/ncclprof/ncclprof/internal/traceevent"
	"github.com/ncclprof/ncclprof/internal/tracefile"
)

var zeroBase int64

func realTrace(t testing.TB, name string) string { return testtraces.Kineto(t, name) }

type tally struct {
	events, kernels, ncclKernels, launches int
	cats                                   map[Cat]int
	firstKernel                            Event
}

func readTally(t *testing.T, path string) (*Trace, tally) {
	t.Helper()
	tl := tally{cats: map[Cat]int{}}
	tr, err := Read(path, Options{Base: &zeroBase}, func(e *Event) error {
		tl.events++
		tl.cats[e.Cat]++
		if e.Cat == CatKernel {
			tl.kernels++
			if IsNCCLKernel(e.Name) {
				if tl.ncclKernels == 0 {
					tl.firstKernel = *e
				}
				tl.ncclKernels++
			}
		}
		if (e.Cat == CatRuntime || e.Cat == CatDriver) && IsLaunch(e.Name) {
			tl.launches++
		}
		return nil
	})
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return tr, tl
}

// The counts below were taken from the files with Python's json module.
func TestRealTraces(t *testing.T) {
	cases := []struct {
		file                          string
		events, ncclKernels, launches int
		hasBase, absolute             bool
		base                          int64
		rank, world                   int
		pid                           int64
	}{
		{"nccl_parser_config_nccl_data.json.gz", 40573, 21, 2700, true, false, 1711964646000000000, 0, 2, 2910249},
		{"negative_queue_length_values_check_rank0.json.gz", 108936, 80, 5240, false, true, 0, 0, 16, 4515},
		{"trace_filter_sampled_rank-0.json.gz", 4855, 10, 1154, false, true, 0, 0, 128, 4037},
		{"trace_filter_sampled_rank-1.json.gz", 4720, 10, 1104, false, true, 0, 1, 128, 4045},
		{"triton_example_triton_example.json.gz", 71, 0, 1, true, false, 1727743122000000000, -1, -1, 0},
		{"cpu_only_rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz", 30, 0, 0, true, false, 1719853884000000000, 34, 300, 1074},
		// A tiny synthetic file with relative ts and no base: read with an explicit base of 0.
		{"large_integer_trace.json.gz", 2, 1, 0, true, false, 0, -1, -1, 0},
	}
	for _, c := range cases {
		t.Run(c.file, func(t *testing.T) {
			tr, tl := readTally(t, realTrace(t, c.file))
			if tl.events != c.events || tr.Events != c.events {
				t.Errorf("events: visited %d, counted %d, want %d", tl.events, tr.Events, c.events)
			}
			if tl.ncclKernels != c.ncclKernels {
				t.Errorf("NCCL kernels %d, want %d", tl.ncclKernels, c.ncclKernels)
			}
			if tl.launches != c.launches {
				t.Errorf("launch calls %d, want %d", tl.launches, c.launches)
			}
			if tr.HasBase != c.hasBase || tr.Absolute != c.absolute || tr.Base != c.base {
				t.Errorf("time base: has %v abs %v base %d, want %v %v %d", tr.HasBase, tr.Absolute, tr.Base, c.hasBase, c.absolute, c.base)
			}
			if tr.Rank != c.rank || tr.WorldSize != c.world {
				t.Errorf("rank %d/%d, want %d/%d", tr.Rank, tr.WorldSize, c.rank, c.world)
			}
			if c.pid != 0 && tr.Pid != c.pid {
				t.Errorf("pid %d, want %d", tr.Pid, c.pid)
			}
		})
	}
}

// The kernel in kineto-trace-format.md §1.2: ts 4458677009853.422 with base 1711964646 s is
// 1716423323009853422 Unix ns, and its collective args are read.
func TestNCCLKernelFields(t *testing.T) {
	tr, tl := readTally(t, realTrace(t, "nccl_parser_config_nccl_data.json.gz"))
	k := tl.firstKernel
	if got := tr.Unix(k.Ts); got != 1716423323009853422 {
		t.Errorf("kernel time %d, want 1716423323009853422", got)
	}
	if k.Dur != 2636669 {
		t.Errorf("dur %d ns, want 2636669", k.Dur)
	}
	if k.Pid.Num != 0 || k.Tid.Num != 40 || k.Correlation() != 60047 {
		t.Errorf("pid %v tid %v corr %d", k.Pid, k.Tid, k.Correlation())
	}
	c := k.Comms()
	if c.Collective != "allreduce" || c.InNelems != 6637568 || c.Dtype != "Float" || c.GroupSize != 2 || c.PGName != "0" || c.PGRanks != "[0, 1]" {
		t.Errorf("comms args %+v", c)
	}
	if got := k.Raw[k.TsSpan.Start:k.TsSpan.End]; got != "4458677009853.422" {
		t.Errorf("ts span %q", got)
	}
}

func TestCommsIDAboveInt64(t *testing.T) {
	var id uint64
	_, err := Read(realTrace(t, "large_integer_trace.json.gz"), Options{Base: &zeroBase}, func(e *Event) error {
		if c := e.Comms(); c.HasCommsID {
			id = c.CommsID
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if id != 10159970886766084423 {
		t.Fatalf("Comms Id %d, want 10159970886766084423", id)
	}
}

func parseString(t *testing.T, doc string) (*Trace, []Event, error) {
	t.Helper()
	var evs []Event
	tr, err := Parse("test.json", []byte(doc), Options{}, func(e *Event) error {
		evs = append(evs, *e)
		return nil
	})
	return tr, evs, err
}

// Every era's time encoding lands on the same Unix ns.
func TestEras(t *testing.T) {
	const want = int64(1716423323009853000)
	docs := map[string]string{
		"relative+base (2.4+)":       `{"traceEvents":[{"ph":"X","name":"k","pid":1,"tid":2,"ts":4458677009853.000,"dur":1}],"baseTimeNanoseconds":1711964646000000000}`,
		"base first (2025+)":         `{"baseTimeNanoseconds":1711964646000000000,"displayTimeUnit":"ns","traceEvents":[{"ph":"X","name":"k","pid":1,"tid":2,"ts":4458677009853,"dur":1}]}`,
		"absolute integer µs (≤2.3)": `{"traceEvents":[{"ph":"X","name":"k","pid":1,"tid":2,"ts":1716423323009853,"dur":1}]}`,
		"absolute float µs":          `{"displayTimeUnit":"ns","traceEvents":[{"ph":"X","name":"k","pid":1,"tid":2,"ts":1716423323009853.0,"dur":1.0}]}`,
		"bare array, string tid":     `[{"ph":"X","cat":"Kernel","name":"k","pid":1,"tid":"stream 7","ts":"1716423323009853","dur":1}]`,
		"exponent":                   `{"traceEvents":[{"ph":"X","name":"k","pid":1,"tid":2,"ts":1.716423323009853e15,"dur":1}]}`,
	}
	for name, doc := range docs {
		tr, evs, err := parseString(t, doc)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if len(evs) != 1 || tr.Unix(evs[0].Ts) != want || evs[0].Dur != 1000 {
			t.Errorf("%s: got %+v", name, evs)
		}
	}
	_, evs, _ := parseString(t, docs["bare array, string tid"])
	if !evs[0].Tid.IsStr || evs[0].Tid.Str != "stream 7" || evs[0].Cat != CatKernel {
		t.Errorf("string tid / 2021 cat: %+v", evs[0])
	}
}

func TestRelativeWithoutBase(t *testing.T) {
	_, _, err := parseString(t, `{"traceEvents":[{"ph":"X","name":"k","pid":1,"tid":2,"ts":4458677009853.422,"dur":1}]}`)
	if err == nil || !strings.Contains(err.Error(), "--kineto-base") {
		t.Fatalf("want advice to pass --kineto-base, got %v", err)
	}
}

// Hostile and broken inputs give an error that names the file and the byte, never a panic.
func TestHostileInputs(t *testing.T) {
	deep := `{"traceEvents":[{"ph":"X","args":` + strings.Repeat("[", 100000) + strings.Repeat("]", 100000) + `}]}`
	cases := map[string]struct {
		doc    string
		offset int64
		want   string
	}{
		"empty":          {"", 0, "empty"},
		"garbage":        {"\x00\x01\xfe binary", 0, "not a JSON trace"},
		"deep":           {deep, int64(strings.Index(deep, "[[")) + 512, "nested deeper"},
		"huge ts":        {`{"traceEvents":[{"ph":"X","ts":1e400,"dur":1,"pid":1,"tid":1}]}`, 31, "ts is not a number"},
		"truncated":      {`{"traceEvents":[{"ph":"X","ts":1,"dur":1,"pid":1,"tid":1},{"ph":"X","ts":2`, 74, "ends early"},
		"missing comma":  {`{"traceEvents":[{"ph":"X" "ts":1}]}`, 26, "',' or '}' was expected"},
		"trailing data":  {`{"traceEvents":[]} {}`, 19, "after the end"},
		"no traceEvents": {`{"schemaVersion":1}`, 0, "no traceEvents"},
		"bad escape":     {`{"traceEvents":[{"ph":"X","name":"a\q"}]}`, 35, "invalid escape"},
		"no ph":          {`{"traceEvents":[{"name":"x"}]}`, 16, "has no ph"},
	}
	for name, c := range cases {
		_, _, err := parseString(t, c.doc)
		var ke *traceevent.Error
		if !errors.As(err, &ke) {
			t.Errorf("%s: want a *traceevent.Error, got %v", name, err)
			continue
		}
		if ke.Offset != c.offset || !strings.Contains(ke.Error(), c.want) || ke.Path != "test.json" {
			t.Errorf("%s: got %q at %d, want %q at %d", name, ke.Error(), ke.Offset, c.want, c.offset)
		}
	}
}

func TestTruncatedGzip(t *testing.T) {
	raw, err := os.ReadFile(realTrace(t, "trace_filter_sampled_rank-0.json.gz"))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "cut.json.gz")
	if err := os.WriteFile(path, raw[:len(raw)/2], 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = Read(path, Options{}, nil)
	if err == nil || !strings.Contains(err.Error(), "truncated") || !strings.Contains(err.Error(), path) {
		t.Fatalf("want a truncation error naming the file, got %v", err)
	}
}

func TestGzipAndPlainReadAlike(t *testing.T) {
	plain, err := tracefile.ReadFile(realTrace(t, "triton_example_triton_example.json.gz"))
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	zw.Write(plain)
	zw.Close()
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "a.json"), plain, 0o644)
	os.WriteFile(filepath.Join(dir, "a.json.gz"), buf.Bytes(), 0o644)
	a, _ := tracefile.ReadFile(filepath.Join(dir, "a.json"))
	b, _ := tracefile.ReadFile(filepath.Join(dir, "a.json.gz"))
	if !bytes.Equal(a, b) || !bytes.Equal(a, plain) {
		t.Fatal("plain and gzip reads differ")
	}
}

func TestHandlerFileName(t *testing.T) {
	doc := []byte(`{"traceEvents":[{"ph":"X","cat":"cpu_op","name":"a","pid":4242,"tid":4242,"ts":1716423323009853,"dur":1}]}`)
	tr, err := Parse("/x/node7_4242.1716423323009.pt.trace.json", doc, Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if tr.Host != "node7" || tr.Pid != 4242 {
		t.Fatalf("host %q pid %d", tr.Host, tr.Pid)
	}
}

// Decode reads on the parsing goroutines exactly what the Event methods read on the visiting
// one, on every real trace: each launch call's and kernel's correlation, each NCCL kernel's
// and collective record_function's args, each flow event's id.
func TestDecodeMatchesMethods(t *testing.T) {
	paths, _ := filepath.Glob(filepath.Join(testtraces.KinetoDir(t), "*.json.gz"))
	if len(paths) == 0 {
		t.Fatal("no real traces")
	}
	var launches, nccl, annots, flows int
	for _, p := range paths {
		_, err := Read(p, Options{Base: &zeroBase, Decode: true}, func(e *Event) error {
			d := e.Decoded
			plain := *e
			plain.Decoded = nil
			want := Decoded{}
			if e.Ph == "s" || e.Ph == "t" || e.Ph == "f" {
				want.FlowID, want.FlowIDOK = traceevent.FlowID(e.IDRaw)
				flows++
			}
			if e.Ph == "X" {
				switch e.Cat {
				case CatRuntime, CatDriver:
					if IsLaunch(e.Name) || IsGraphLaunch(e.Name) {
						want.Launch, want.Corr = true, plain.Correlation()
						launches++
					}
				case CatKernel:
					want.Corr = plain.Correlation()
					if IsNCCLKernel(e.Name) {
						want.NCCL, want.Comms = true, plain.Comms()
						nccl++
					}
				case CatUserAnnotation, CatCPUOp:
					want.Comms, want.Annotation = plain.AnnotationComms()
					if want.Annotation {
						annots++
					}
				}
			}
			if *d != want {
				t.Fatalf("%s: event at %d: decoded %+v, methods %+v", p, e.Off, *d, want)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if launches == 0 || nccl == 0 || annots == 0 || flows == 0 {
		t.Fatalf("the traces exercise too little: %d launches, %d NCCL kernels, %d annotations, %d flow events", launches, nccl, annots, flows)
	}
}
