package telemetry

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// floodEnv makes this test binary the attacker of TestPrometheusConnectionFlood (TestMain): it
// opens NCCLPROF_TEST_FLOOD_CONNS connections to the address, says "ready" and holds them until
// its standard input closes. A separate process, like the other local user of the audit.
const floodEnv = "NCCLPROF_TEST_FLOOD_ADDR"

func TestMain(m *testing.M) {
	if addr := os.Getenv(floodEnv); addr != "" {
		n, _ := strconv.Atoi(os.Getenv("NCCLPROF_TEST_FLOOD_CONNS"))
		var held []net.Conn
		for len(held) < n {
			c, err := net.DialTimeout("tcp", addr, 5*time.Second)
			if err != nil {
				fmt.Printf("failed after %d connections: %v\n", len(held), err)
				os.Exit(1)
			}
			held = append(held, c)
		}
		fmt.Printf("ready %d\n", len(held))
		_, _ = io.Copy(io.Discard, os.Stdin)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func openFDs(t *testing.T) int {
	t.Helper()
	es, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(es)
}

// setNoFile sets the soft RLIMIT_NOFILE of the test process until the test ends.
func setNoFile(t *testing.T, soft uint64) {
	t.Helper()
	var old syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &old); err != nil {
		t.Fatal(err)
	}
	if soft > old.Max {
		t.Skipf("the hard RLIMIT_NOFILE (%d) is below %d", old.Max, soft)
	}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &syscall.Rlimit{Cur: soft, Max: old.Max}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &old) })
}

// canOpen opens n descriptors (the job's own open()) and closes them again.
func canOpen(t *testing.T, n int) error {
	t.Helper()
	var fs []*os.File
	defer func() {
		for _, f := range fs {
			f.Close()
		}
	}()
	for i := 0; i < n; i++ {
		f, err := os.Open(os.DevNull)
		if err != nil {
			return fmt.Errorf("open() number %d failed: %w", i+1, err)
		}
		fs = append(fs, f)
	}
	return nil
}

func scrape(addr string) (string, error) {
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := c.Get("http://" + addr + "/metrics")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("status %s", resp.Status)
	}
	return string(b), err
}

// TestPrometheusConnectionFlood (issue 14 item 1): another process holding 1000 connections to
// the Prometheus endpoint of a job limited to 1024 descriptors took every one of them, and the
// job's own open() failed with EMFILE. Now the endpoint holds at most PromMaxConns, the job can
// still open hundreds of files, and a scrape during the flood is answered; near RLIMIT_NOFILE
// the endpoint refuses connections rather than take the job's last descriptors.
func TestPrometheusConnectionFlood(t *testing.T) {
	setNoFile(t, 1024)
	cfg, _ := FromEnv(envOf())
	cfg.Exporter, cfg.PromAddr, cfg.PromPort = ExporterPrometheus, "127.0.0.1", freePort(t)
	r, err := New(context.Background(), Options{Config: cfg, Host: Host{Name: "h", PID: 1, LocalRank: -1}})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Shutdown(context.Background())
	r.RecordOp(allReduce(1, 1<<20, 2e6, 1e4, 0, 0, nil, nil))
	r.Pass()
	_ = r.Sync(context.Background())
	addr := r.Stats().PrometheusAddr
	base := openFDs(t)

	const conns = 1000
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	attacker := exec.Command(self)
	attacker.Env = append(os.Environ(), floodEnv+"="+addr, "NCCLPROF_TEST_FLOOD_CONNS="+strconv.Itoa(conns))
	stdin, _ := attacker.StdinPipe()
	stdout, _ := attacker.StdoutPipe()
	attacker.Stderr = os.Stderr
	if err := attacker.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { stdin.Close(); _ = attacker.Wait() }()
	line, _ := bufio.NewReader(stdout).ReadString('\n')
	if line != fmt.Sprintf("ready %d\n", conns) {
		t.Fatalf("the attacker says %q", line)
	}
	// Every connection reaches the endpoint's Accept; all but PromMaxConns are closed.
	if !waitFor(10*time.Second, func() bool { return r.Stats().PrometheusRefused >= conns-PromMaxConns }) {
		t.Fatalf("after 10 s the endpoint has turned away %d of %d connections", r.Stats().PrometheusRefused, conns)
	}
	held, s := openFDs(t), r.Stats()
	t.Logf("1000 connections from another process: the job holds %d descriptors (%d before), the endpoint %d "+
		"connections; %d turned away", held, base, s.PrometheusConns, s.PrometheusRefused)
	// The job's own new descriptors: the attacker's two pipes and its pidfd.
	if held > base+3+PromMaxConns || s.PrometheusConns > PromMaxConns {
		t.Errorf("the endpoint holds %d connections and the job %d descriptors (%d before the flood)",
			s.PrometheusConns, held, base)
	}
	if err := canOpen(t, 900); err != nil {
		t.Errorf("the job's own files during the flood: %v", err)
	}
	if body, err := scrape(addr); err != nil || !strings.Contains(body, "ncclprof_ops_total") {
		t.Errorf("scrape during the flood: %v", err)
	}

	// Close to the limit: the endpoint keeps nothing, the job's descriptors stay the job's.
	stdin.Close()
	_ = attacker.Wait()
	if !waitFor(10*time.Second, func() bool { return r.Stats().PrometheusConns == 0 }) {
		t.Fatalf("%d connections still held after the attacker left", r.Stats().PrometheusConns)
	}
	keepAlive := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{MaxConnsPerHost: 1}}
	get := func() error {
		resp, err := keepAlive.Get("http://" + addr + "/metrics")
		if err == nil {
			_, err = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		return err
	}
	if err := get(); err != nil { // a connection kept open
		t.Fatal(err)
	}
	// The client has its response before the server files the connection as idle (and checks
	// the descriptors then): lowering the limit before that would close it then, not after
	// its next request.
	if !waitFor(5*time.Second, func() bool { return idleConns(r.promConns) == 1 }) {
		t.Fatalf("the kept connection never went idle on the server")
	}
	now := openFDs(t)
	setNoFile(t, uint64(now+PromFDHeadroom-8))
	if _, err := scrape(addr); err == nil {
		t.Errorf("a scrape was answered with fewer than %d descriptors to spare", PromFDHeadroom)
	}
	// The connection already open is answered once more, then closed.
	if err := get(); err != nil {
		t.Errorf("the open connection's request: %v", err)
	}
	if !waitFor(5*time.Second, func() bool { return r.Stats().PrometheusConns == 0 }) {
		t.Errorf("%d connections kept with fewer than %d descriptors to spare", r.Stats().PrometheusConns, PromFDHeadroom)
	}
	if err := canOpen(t, PromFDHeadroom-8-2); err != nil {
		t.Errorf("the job's own files near the limit: %v", err)
	}
	setNoFile(t, 1024)
	if _, err := scrape(addr); err != nil {
		t.Errorf("scrape once descriptors are free again: %v", err)
	}
}

// idleConns is how many of g's connections sit between requests, their fate decided.
func idleConns(g *connGuard) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	n := 0
	for _, info := range g.conns {
		if !info.busy {
			n++
		}
	}
	return n
}
