package merge

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/ncclprof/ncclprof/internal/kineto"
	"github.com/ncclprof/ncclprof/internal/ptrace"
)

// pairer finds each Kineto trace's plugin traces by the metadata both carry: the process id,
// the host, and the rank. A process may have written several plugin files (one per trace
// window); they all go with it.
type pairer struct {
	plugins []*ptrace.Trace
	used    map[*ptrace.Trace]bool
	oneEach bool // one file on each side: paired as given
	opt     Options
	index   *pluginIndexes // each plugin trace's index
}

func newPairer(plugins []*ptrace.Trace, kinetoPaths []string, opt Options) *pairer {
	return &pairer{plugins: plugins, used: map[*ptrace.Trace]bool{}, opt: opt,
		oneEach: len(kinetoPaths) == 1 && len(plugins) == 1}
}

func (p *pairer) pluginsFor(kt *kineto.Trace) ([]*ptrace.Trace, error) {
	if explicit, ok := p.explicit(kt.Path); ok {
		for _, t := range explicit {
			if err := p.check(kt, t); err != nil {
				return nil, err
			}
			p.used[t] = true
		}
		return explicit, nil
	}
	if p.oneEach {
		t := p.plugins[0]
		if err := p.check(kt, t); err != nil {
			return nil, err
		}
		p.used[t] = true
		return []*ptrace.Trace{t}, nil
	}
	var out []*ptrace.Trace
	for _, t := range p.plugins {
		if !p.used[t] && sameProcess(kt, t) {
			out = append(out, t)
		}
	}
	if len(out) == 0 && kt.Pid == 0 && kt.Rank >= 0 {
		// No pid to go by: fall back on the rank.
		for _, t := range p.plugins {
			if !p.used[t] && pluginRank(t) == kt.Rank {
				out = append(out, t)
			}
		}
	}
	if len(out) == 0 && len(p.plugins) > 0 {
		p.opt.logf("warning: no plugin trace matches %s (pid %d, host %q, rank %d); it is written without NCCL events", kt.Path, kt.Pid, kt.Host, kt.Rank)
	}
	for _, t := range out {
		p.used[t] = true
	}
	return out, nil
}

// explicit returns the plugin traces --pair gave for a Kineto path.
func (p *pairer) explicit(kpath string) ([]*ptrace.Trace, bool) {
	for k, paths := range p.opt.Pairs {
		if !samePath(k, kpath) {
			continue
		}
		var out []*ptrace.Trace
		for _, np := range paths {
			for _, t := range p.plugins {
				if samePath(t.Path, np) {
					out = append(out, t)
				}
			}
		}
		return out, true
	}
	return nil, false
}

func samePath(a, b string) bool {
	aa, _ := filepath.Abs(a)
	bb, _ := filepath.Abs(b)
	return aa == bb
}

func sameProcess(kt *kineto.Trace, t *ptrace.Trace) bool {
	if kt.Pid == 0 || t.Pid == 0 || kt.Pid != t.Pid || t.Unanchored && kt.Pid != t.Pid {
		return false
	}
	return kt.Host == "" || t.Host == "" || kt.Host == t.Host
}

// pluginRank is the rank of the plugin's process in its largest communicator.
func pluginRank(t *ptrace.Trace) int {
	best, n := -1, 0
	for _, c := range t.Comms {
		if c.NRanks > n {
			best, n = c.Rank, c.NRanks
		}
	}
	return best
}

// check refuses to merge a plugin trace into a Kineto trace of another process.
func (p *pairer) check(kt *kineto.Trace, t *ptrace.Trace) error {
	var diffs []string
	if kt.Pid != 0 && t.Pid != 0 && kt.Pid != t.Pid {
		diffs = append(diffs, fmt.Sprintf("pid %d ≠ %d", kt.Pid, t.Pid))
	}
	if kt.Host != "" && t.Host != "" && kt.Host != t.Host {
		diffs = append(diffs, fmt.Sprintf("host %q ≠ %q", kt.Host, t.Host))
	}
	if r := pluginRank(t); kt.Rank >= 0 && r >= 0 && kt.WorldSize > 0 && t.Comms[0].NRanks > 0 && r != kt.Rank && worldComm(t, kt.WorldSize) {
		diffs = append(diffs, fmt.Sprintf("rank %d ≠ %d", kt.Rank, r))
	}
	if len(diffs) == 0 || p.opt.Force {
		return nil
	}
	return fmt.Errorf("%s and %s are not the same process (%s): pass the plugin trace this rank wrote (its file name has the pid: ncclprof-<host>-<pid>-<n>.trace.json), or --force to merge them anyway (links would be wrong)",
		kt.Path, t.Path, strings.Join(diffs, ", "))
}

// worldComm reports whether the plugin saw a communicator as large as the Kineto world, whose
// rank is then the global rank.
func worldComm(t *ptrace.Trace, world int) bool {
	for _, c := range t.Comms {
		if c.NRanks == world {
			return true
		}
	}
	return false
}

// leftovers warns about plugin traces no Kineto trace took.
func (p *pairer) leftovers() error {
	for _, t := range p.plugins {
		if !p.used[t] {
			p.opt.logf("warning: %s (pid %d, host %q) matches no Kineto trace; it is not in the output", t.Path, t.Pid, t.Host)
		}
	}
	return nil
}
