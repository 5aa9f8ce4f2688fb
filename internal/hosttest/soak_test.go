package hosttest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"strconv"
	"testing"
	"time"
)

// SoakSample is one line of the host's soak output.
type SoakSample struct {
	T          float64 `json:"t"`
	CallsPerS  uint64  `json:"calls_per_s"`
	Dropped    uint64  `json:"dropped"`
	Events     uint64  `json:"events"`
	RSSKiB     int64   `json:"rss_kib"`
	Threads    int64   `json:"threads"`
	FDs        int64   `json:"fds"`
	Goroutines uint64  `json:"goroutines"`
	GoHeap     uint64  `json:"go_heap"`
	Cycles     uint64  `json:"cycles"`
}

// ParseSoak reads the samples (the summary line is skipped).
func ParseSoak(t testing.TB, out []byte) []SoakSample {
	var ss []SoakSample
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if bytes.Contains(sc.Bytes(), []byte(`"summary"`)) {
			continue
		}
		var s SoakSample
		if err := json.Unmarshal(sc.Bytes(), &s); err != nil {
			t.Fatalf("soak line %q: %v", sc.Text(), err)
		}
		ss = append(ss, s)
	}
	return ss
}

// envPositive is the environment variable's positive integer, or def when it is unset or not one.
func envPositive(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
		return n
	}
	return def
}

// Communicators created and destroyed in cycles, three NCCL threads at full rate: after a
// warm-up, resident memory, threads, open files and goroutines stay flat (make test: 20 s with
// 16 communicators; make soak: 10 minutes with 64).
func TestSoakShort(t *testing.T) {
	// make soak: NCCLPROF_SOAK_SECONDS=600, NCCLPROF_SOAK_COMMS=64.
	secs, comms := envPositive("NCCLPROF_SOAK_SECONDS", 20), envPositive("NCCLPROF_SOAK_COMMS", 16)
	r := Start(t, Options{Args: []string{"--seconds", strconv.Itoa(secs), "--comms", strconv.Itoa(comms), "--iters", "1000", "soak"},
		Env: []string{"NCCLPROF_METRICS=none", "NCCLPROF_SUMMARY=0"}, Timeout: time.Duration(secs+120) * time.Second})
	ss := ParseSoak(t, r.Stdout)
	if len(ss) < secs/2 {
		t.Fatalf("%d samples in %d s", len(ss), secs)
	}
	warm := ss[len(ss)/4:]
	first, last := warm[0], warm[len(warm)-1]
	var maxRSS, minRSS int64 = 0, 1 << 62
	var maxThreads, minThreads int64 = 0, 1 << 62
	for _, s := range warm {
		maxRSS, minRSS = max(maxRSS, s.RSSKiB), min(minRSS, s.RSSKiB)
		maxThreads, minThreads = max(maxThreads, s.Threads), min(minThreads, s.Threads)
		if s.FDs != first.FDs || s.Goroutines != first.Goroutines {
			t.Errorf("at %.0f s: %d fds, %d goroutines; at %.0f s: %d, %d", s.T, s.FDs, s.Goroutines,
				first.T, first.FDs, first.Goroutines)
		}
	}
	// The Go runtime may add a thread while one sits in a blocking cgo call: a bounded jitter,
	// not growth.
	if maxThreads-minThreads > 2 {
		t.Errorf("threads went from %d to %d", minThreads, maxThreads)
	}
	// The Go heap cycles through garbage collections (tens of MiB at this rate), so growth shows
	// in the floor: the lowest reading (just after a collection) of each half.
	half := len(warm) / 2
	floor := func(ss []SoakSample) int64 {
		m := ss[0].RSSKiB
		for _, s := range ss {
			m = min(m, s.RSSKiB)
		}
		return m
	}
	early, late := floor(warm[:half]), floor(warm[half:])
	if late-early > 16*1024 {
		t.Errorf("resident memory grows: lowest %d KiB in the first half, %d KiB in the second", early, late)
	}
	if maxRSS-minRSS > 96*1024 {
		t.Errorf("resident memory swings %d KiB (%d–%d KiB)", maxRSS-minRSS, minRSS, maxRSS)
	}
	if last.Cycles < 3 || last.Events == 0 {
		t.Errorf("only %d cycles, %d events", last.Cycles, last.Events)
	}
	var rate uint64
	for _, s := range warm {
		rate += s.CallsPerS
	}
	t.Logf("%d s: %d callbacks/s on average, %d cycles of %d communicators, resident %d–%d KiB "+
		"(floor %d KiB early, %d KiB late), %d–%d threads, %d fds, %d goroutines, %d events recorded, "+
		"%d dropped (counted)", secs, rate/uint64(len(warm)), last.Cycles, comms, minRSS, maxRSS, early, late,
		minThreads, maxThreads, first.FDs, first.Goroutines, last.Events, last.Dropped)
}
