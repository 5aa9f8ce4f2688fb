package telemetry

import (
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// The Prometheus endpoint has no authentication: whoever can reach its address can connect (on
// the default 127.0.0.1, every user of the node). Each connection costs the training process a
// file descriptor, so what connections may hold is bounded, and the endpoint never takes the
// descriptors the job itself needs:
const (
	// PromMaxConns is how many connections are open at once. When a new one arrives at the
	// limit, the oldest connection that has not sent a request (or sits idle between requests)
	// is closed for it; if every one is busy, the new one is closed. A scraper sends its request
	// at once, so idle connections held open by someone else cannot keep it out.
	PromMaxConns = 8
	// PromFDHeadroom: while fewer descriptors than this (or 1/16 of RLIMIT_NOFILE, if more)
	// remain below the process's limit, new connections are closed at once and idle ones
	// after their request.
	PromFDHeadroom = 64
	// Per connection: the request headers must arrive within PromHeaderTimeout, the request
	// within PromReadTimeout, the response go out within PromWriteTimeout; an idle keep-alive
	// connection is closed after PromIdleTimeout, and any after PromMaxLifetime once idle.
	PromHeaderTimeout = 5 * time.Second
	PromReadTimeout   = 10 * time.Second
	PromWriteTimeout  = 30 * time.Second
	PromIdleTimeout   = 30 * time.Second
	PromMaxLifetime   = 5 * time.Minute
	// promMaxScrapes bounds the scrapes answered at once (more get 503): each one walks every
	// series.
	promMaxScrapes = 2
)

// KindPromRefused is the ncclprof.plugin.conditions kind that counts the connections the
// Prometheus endpoint closed to stay within its bounds.
const KindPromRefused = "prometheus_conns_refused"

// promServer serves the registry on ln within the bounds above.
func promServer(reg *prometheus.Registry, ln net.Listener) (*http.Server, *connGuard) {
	g := &connGuard{Listener: ln, max: PromMaxConns, room: fdRoom, conns: map[*guardedConn]*connInfo{}}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		ErrorHandling: promhttp.ContinueOnError, EnableOpenMetrics: true, Timeout: 10 * time.Second,
		MaxRequestsInFlight: promMaxScrapes}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: PromHeaderTimeout, ReadTimeout: PromReadTimeout,
		WriteTimeout: PromWriteTimeout, IdleTimeout: PromIdleTimeout, MaxHeaderBytes: 16 << 10,
		ConnState: g.state}
	return srv, g
}

// fdRoom says whether the process may open one more descriptor and still leave the headroom
// free: open descriptors (/proc/self/fd) against RLIMIT_NOFILE's soft limit.
func fdRoom() bool {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil || lim.Cur == ^uint64(0) { // RLIM_INFINITY
		return true
	}
	d, err := os.Open("/proc/self/fd")
	if err != nil {
		return true // no /proc: the connection limit alone bounds what the endpoint holds
	}
	defer d.Close()
	names, _ := d.Readdirnames(-1)
	headroom := max(uint64(PromFDHeadroom), lim.Cur/16)
	return uint64(len(names))+headroom < lim.Cur
}

// connGuard is the endpoint's listener: it admits a connection only within the bounds.
type connGuard struct {
	net.Listener
	max  int
	room func() bool

	mu      sync.Mutex
	conns   map[*guardedConn]*connInfo
	refused atomic.Uint64 // connections closed at once (no room) or evicted
}

type connInfo struct {
	born time.Time
	busy bool // a request is being read or answered
}

type guardedConn struct {
	net.Conn
	g    *connGuard
	once sync.Once
}

func (c *guardedConn) Close() error {
	c.once.Do(func() { c.g.forget(c) })
	return c.Conn.Close()
}

func (g *connGuard) Accept() (net.Conn, error) {
	for {
		c, err := g.Listener.Accept()
		if err != nil {
			return nil, err
		}
		gc := &guardedConn{Conn: c, g: g}
		if g.admit(gc) {
			return gc, nil
		}
		g.refused.Add(1)
		_ = c.Close()
	}
}

// admit keeps c if the process has descriptors to spare, making room by closing the oldest
// connection that is not busy when at the limit.
func (g *connGuard) admit(c *guardedConn) bool {
	if !g.room() {
		return false
	}
	g.mu.Lock()
	var victim *guardedConn
	if len(g.conns) >= g.max {
		var oldest time.Time
		for vc, info := range g.conns {
			if !info.busy && (victim == nil || info.born.Before(oldest)) {
				victim, oldest = vc, info.born
			}
		}
		if victim == nil {
			g.mu.Unlock()
			return false
		}
		delete(g.conns, victim)
	}
	g.conns[c] = &connInfo{born: time.Now()}
	g.mu.Unlock()
	if victim != nil {
		g.refused.Add(1)
		_ = victim.Close()
	}
	return true
}

func (g *connGuard) forget(c *guardedConn) {
	g.mu.Lock()
	delete(g.conns, c)
	g.mu.Unlock()
}

// state follows the server's view of each connection (http.Server.ConnState).
func (g *connGuard) state(nc net.Conn, s http.ConnState) {
	c, ok := nc.(*guardedConn)
	if !ok {
		return
	}
	g.mu.Lock()
	info := g.conns[c]
	g.mu.Unlock()
	if info == nil {
		return
	}
	// Between requests: past its lifetime, or the job now short of descriptors, it goes. The
	// check comes before the connection counts as idle, so it stays busy (never evicted by
	// admit) until its fate is decided.
	if s == http.StateIdle && (time.Since(info.born) > PromMaxLifetime || !g.room()) {
		_ = c.Close()
		return
	}
	g.mu.Lock()
	info.busy = s == http.StateActive
	g.mu.Unlock()
}

// open is how many connections are held now.
func (g *connGuard) open() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.conns)
}
