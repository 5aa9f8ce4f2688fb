package hang

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"

	"github.com/ncclprof/ncclprof/internal/parallel"
	"github.com/ncclprof/ncclprof/internal/tracefile"
)

// Loaded is a dump and the file it came from.
type Loaded struct {
	Path string
	*Dump
}

// Problem is an input that could not be used, and why, in words for the user.
type Problem struct {
	Path string `json:"path"`
	Msg  string `json:"problem"`
}

// Input is what the analysis reads: every process's dump, and beside them the plugin's
// communicator summaries and traces, which tell about processes that wrote no dump.
type Input struct {
	Dumps     []Loaded
	Summaries []Summary
	Traces    []string
	Problems  []Problem
}

var (
	dumpRE    = regexp.MustCompile(`^ncclprof-hang-.+-\d+(\.\d+)?\.json$`) // .N: the name was taken
	summaryRE = regexp.MustCompile(`^ncclprof-summary-.+\.json$`)
	traceRE   = regexp.MustCompile(`\.trace\.json(\.gz)?$`)
)

// IsDumpName says whether a file name is a dump's.
func IsDumpName(name string) bool { return dumpRE.MatchString(filepath.Base(name)) }

// Found is what Find found.
type Found struct {
	Dumps, Summaries, Traces []string
	// Others are files named explicitly (or matched by a glob) that are none of those by their
	// names: ncclmerge hang reads them as dumps (a renamed copy), ncclmerge report as traces.
	Others []string
}

// Find sorts the arguments (files, directories, quoted globs) into dumps, summaries and traces by
// their names. A directory gives the files of those three kinds directly in it.
func Find(args []string) (*Found, error) {
	f := &Found{}
	add := func(p string, named bool) {
		switch b := filepath.Base(p); {
		case summaryRE.MatchString(b):
			f.Summaries = append(f.Summaries, p)
		case traceRE.MatchString(b):
			f.Traces = append(f.Traces, p)
		case dumpRE.MatchString(b):
			f.Dumps = append(f.Dumps, p)
		case named:
			f.Others = append(f.Others, p)
		}
	}
	for _, a := range args {
		st, serr := os.Stat(a)
		switch {
		case serr == nil && st.IsDir():
			ents, rerr := os.ReadDir(a)
			if rerr != nil {
				return nil, rerr
			}
			for _, e := range ents {
				if !e.IsDir() {
					add(filepath.Join(a, e.Name()), false)
				}
			}
		case serr == nil:
			add(a, true)
		default:
			m, _ := filepath.Glob(a)
			if len(m) == 0 {
				return nil, fmt.Errorf("%s: no such file or directory, and no file matches it as a pattern", a)
			}
			for _, p := range m {
				add(p, true)
			}
		}
	}
	return f, nil
}

// Load finds and reads the inputs. A dump that cannot be read (cut short, not JSON, of another
// format) is a Problem, and its process is treated as one without a dump; so is an unreadable
// summary. Two dumps of the same process (the same file found twice, or copies) count once: the
// newest.
func Load(args []string) (*Input, error) {
	f, err := Find(args)
	if err != nil {
		return nil, err
	}
	f.Dumps, f.Others = append(f.Dumps, f.Others...), nil
	return f.Load(), nil
}

// Load reads what was found (Others are left out).
func (f *Found) Load() *Input {
	dumps, sums := f.Dumps, f.Summaries
	in := &Input{Traces: f.Traces}
	loaded := make([]*Dump, len(dumps))
	errs := make([]error, len(dumps))
	parallel.Each(len(dumps), func(i int) {
		if loaded[i], errs[i] = ReadFile(dumps[i]); errs[i] == nil {
			loaded[i].peerWaitOf()
		}
	})
	seen := map[string]int{}
	for i, d := range loaded {
		if errs[i] != nil {
			in.Problems = append(in.Problems, Problem{dumps[i], errs[i].Error()})
			continue
		}
		key := dumpKey(d)
		if j, ok := seen[key]; ok {
			if in.Dumps[j].WrittenUnixNs < d.WrittenUnixNs {
				in.Dumps[j] = Loaded{dumps[i], d}
			}
			continue
		}
		seen[key] = len(in.Dumps)
		in.Dumps = append(in.Dumps, Loaded{dumps[i], d})
	}
	for _, p := range sums {
		s, err := readSummary(p)
		if err != nil {
			in.Problems = append(in.Problems, Problem{p, err.Error()})
			continue
		}
		in.Summaries = append(in.Summaries, s)
	}
	slices.SortFunc(in.Problems, func(a, b Problem) int { return cmp.Compare(a.Path, b.Path) })
	return in
}

// ReadFile reads and validates one dump. Its errors say what to make of the file.
func ReadFile(path string) (*Dump, error) {
	b, err := readOwned(path, MaxDumpBytes, "a hang dump")
	if err != nil {
		return nil, err
	}
	return Parse(b)
}

// MaxDumpBytes bounds a dump file: a dump lists at most a process's open operations, some tens
// of KB each (docs/hang.md), so anything larger is not one.
const MaxDumpBytes = 256 << 20

// readOwned reads a regular file of at most max bytes that the reading user owns. Dumps and
// summaries decide whom a verdict blames, and in a shared sticky directory (NCCLPROF_OUTPUT_DIR=
// /tmp) another user can create one under the name of an upcoming process: such a file is
// refused, saying how to use it anyway. It never blocks (a FIFO is refused) and never holds
// more than max (a link to /dev/zero is refused).
func readOwned(path string, max int64, what string) ([]byte, error) {
	f, st, err := tracefile.OpenRegular(path, what)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if sys, ok := st.Sys().(*syscall.Stat_t); ok && int(sys.Uid) != os.Getuid() {
		return nil, fmt.Errorf("owned by uid %d, not by you (uid %d): not read, since in a shared directory another user can plant a file under a rank's name; if you trust it, copy it (the copy is yours) and give the copy", sys.Uid, os.Getuid())
	}
	if st.Size() > max {
		return nil, fmt.Errorf("%d bytes, more than %d: not %s", st.Size(), max, what)
	}
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err == nil && int64(len(b)) > max {
		err = fmt.Errorf("more than %d bytes: not %s", max, what)
	}
	return b, err
}

// Parse reads a dump from its bytes.
func Parse(b []byte) (*Dump, error) {
	if len(bytes.TrimSpace(b)) == 0 {
		return nil, errors.New("empty: its process is treated as one without a dump")
	}
	var d Dump
	if err := json.Unmarshal(b, &d); err != nil {
		var syn *json.SyntaxError
		if errors.As(err, &syn) && syn.Offset >= int64(len(bytes.TrimRight(b, " \n\r\t"))) || strings.Contains(err.Error(), "unexpected end of JSON input") {
			return nil, fmt.Errorf("cut short after %d bytes (the plugin renames a complete file into place, so this one was copied or truncated afterwards): its process is treated as one without a dump", len(b))
		}
		return nil, fmt.Errorf("not a hang dump (%v): its process is treated as one without a dump", err)
	}
	if d.FormatVersion == 0 {
		return nil, errors.New("not a hang dump (no ncclprof_hang_version): its process is treated as one without a dump")
	}
	if d.FormatVersion > Version {
		return nil, fmt.Errorf("written in format %d by a newer ncclprof; this ncclmerge reads format %d: update ncclmerge", d.FormatVersion, Version)
	}
	if err := d.Validate(); err != nil {
		return nil, fmt.Errorf("invalid (%w): its process is treated as one without a dump", err)
	}
	return &d, nil
}

// peerWaitOf has the analysis read a send refused for want of a receive buffer as NCCL 2.27+
// records it (the dump itself keeps what NCCL recorded). Before 2.27 (ABI v1-v3) net.cc records
// no SendPeerWait: the refused step stays in SendGPUWait and the ProxyOp's own state says
// SendRemFifoWait (its data was ready, the isend not taken), so the first step still in
// SendGPUWait is the refused one. Read as it stood, a rank whose send waits for a stuck peer
// looked like a stuck GPU (its receives full, no send waiting on the network).
func (d *Dump) peerWaitOf() {
	for i := range d.Comms {
		for j := range d.Comms[i].Open {
			for k := range d.Comms[i].Open[j].Proxy {
				p := &d.Comms[i].Open[j].Proxy[k]
				if p.Direction != Send || p.State != SendRemFifoWait ||
					slices.ContainsFunc(p.Open, func(s Step) bool { return s.State == SendPeerWait }) {
					continue
				}
				if at := slices.IndexFunc(p.Open, func(s Step) bool { return s.State == SendGPUWait }); at >= 0 {
					p.Open[at].State = SendPeerWait
				}
			}
		}
	}
}

// Summary is what a communicator summary says about a rank: the plugin writes one when NCCL
// destroys the communicator, so the rank had left it, after the operations counted here.
type Summary struct {
	Path   string
	Host   string
	PID    int
	Hash   string
	Rank   int
	NRanks int
	Ops    map[string]uint64 // completed operations per function
}

func readSummary(path string) (Summary, error) {
	var raw struct {
		Version int    `json:"ncclprof_summary_version"`
		Host    string `json:"host"`
		PID     int    `json:"pid"`
		Comm    struct {
			Hash   string `json:"comm_hash"`
			Rank   int    `json:"rank"`
			NRanks int    `json:"nranks"`
		} `json:"comm"`
		Ops []struct {
			Func  string `json:"func"`
			Count uint64 `json:"count"`
		} `json:"operations"`
	}
	b, err := readOwned(path, MaxDumpBytes, "a communicator summary")
	if err == nil {
		err = json.Unmarshal(b, &raw)
	}
	if err == nil && (raw.Version == 0 || !hashRE.MatchString(raw.Comm.Hash)) {
		err = errors.New("no ncclprof_summary_version or comm_hash")
	}
	if err != nil {
		return Summary{}, fmt.Errorf("summary not used: %v", err)
	}
	s := Summary{Path: path, Host: raw.Host, PID: raw.PID, Hash: raw.Comm.Hash, Rank: raw.Comm.Rank, NRanks: raw.Comm.NRanks, Ops: map[string]uint64{}}
	for _, o := range raw.Ops {
		s.Ops[o.Func] += o.Count
	}
	return s, nil
}

// dumpKey tells whether two dumps are of one process (a copy, or an earlier rewrite): host, pid
// and the ranks it holds in its communicators. Processes of containers with their own PID
// namespaces share a host name and pids, and their dumps (ncclprof-hang-<host>-<pid>.N.json)
// must all count.
func dumpKey(d *Dump) string {
	var b strings.Builder
	b.WriteString(procKey(d.Host, d.PID))
	for _, c := range d.Comms {
		fmt.Fprintf(&b, " %s:%d", c.Hash, c.Rank)
	}
	return b.String()
}

// procKey names a process across dumps, summaries and traces: its host and pid.
func procKey(host string, pid int) string { return fmt.Sprintf("%s/%d", host, pid) }
