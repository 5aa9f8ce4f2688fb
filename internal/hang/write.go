package hang

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"

	"github.com/ncclprof/ncclprof/internal/outfile"
)

// FilePrefix and FileSuffix frame a dump's name: ncclprof-hang-<host>-<pid>.json, or
// ncclprof-hang-<host>-<pid>.N.json when a Writer found that name taken.
const (
	FilePrefix = "ncclprof-hang-"
	FileSuffix = ".json"
)

// FileName is the name of a process's dump.
func FileName(host string, pid int) string {
	return fmt.Sprintf("%s%s-%d%s", FilePrefix, host, pid, FileSuffix)
}

// Marshal gives the exact bytes of the dump's file. It first puts the dump in its canonical form:
// the format version, every list in its documented order (communicators by hash then rank, open
// operations oldest first, channels and ProxyOps by channel, steps by index), each open
// operation's age from WrittenUnixNs, and Health.Partial from the counters. Then it validates.
func Marshal(d *Dump) ([]byte, error) {
	d.FormatVersion = Version
	d.Canonical()
	if err := d.Validate(); err != nil {
		return nil, fmt.Errorf("hang dump not written: %w", err)
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", " ")
	if err := enc.Encode(d); err != nil { // ends with a newline
		return nil, err
	}
	return b.Bytes(), nil
}

// Canonical puts the dump in the canonical form Marshal writes (see there).
func (d *Dump) Canonical() {
	slices.SortStableFunc(d.Comms, func(a, b Comm) int { return cmp.Or(cmp.Compare(a.Hash, b.Hash), cmp.Compare(a.Rank, b.Rank)) })
	for i := range d.Comms {
		c := &d.Comms[i]
		if c.Completed == nil {
			c.Completed = []Completed{}
		}
		if c.P2pCompleted == nil {
			c.P2pCompleted = []P2pCompleted{}
		}
		if c.Open == nil {
			c.Open = []Op{}
		}
		if c.Recent == nil {
			c.Recent = []Call{}
		}
		slices.SortStableFunc(c.Completed, func(a, b Completed) int { return cmp.Compare(a.Func, b.Func) })
		slices.SortStableFunc(c.P2pCompleted, func(a, b P2pCompleted) int { return cmp.Compare(a.Peer, b.Peer) })
		slices.SortStableFunc(c.Open, func(a, b Op) int {
			return cmp.Or(cmp.Compare(a.StartUnixNs, b.StartUnixNs), cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Func, b.Func), cmp.Compare(a.Seq, b.Seq), cmp.Compare(a.Repeat, b.Repeat))
		})
		for j := range c.Open {
			o := &c.Open[j]
			o.AgeNs = max(0, d.WrittenUnixNs-o.StartUnixNs)
			if o.Kernel == nil {
				o.Kernel = []KernelCh{}
			}
			if o.Proxy == nil {
				o.Proxy = []ProxyOp{}
			}
			slices.SortStableFunc(o.Kernel, func(a, b KernelCh) int { return cmp.Compare(a.Channel, b.Channel) })
			slices.SortStableFunc(o.Proxy, func(a, b ProxyOp) int {
				return cmp.Or(cmp.Compare(a.Channel, b.Channel), cmp.Compare(a.Direction, b.Direction), cmp.Compare(a.Peer, b.Peer))
			})
			for k := range o.Proxy {
				p := &o.Proxy[k]
				if p.Open == nil {
					p.Open = []Step{}
				}
				slices.SortStableFunc(p.Open, func(a, b Step) int { return cmp.Compare(a.Step, b.Step) })
			}
		}
	}
	if d.Comms == nil {
		d.Comms = []Comm{}
	}
	h := &d.Health
	h.Partial = h.EventsDropped > 0 || h.CommsNotTracked > 0 || h.OpsNotListed > 0
}

// Write writes the dump into dir as FileName(d.Host, d.PID), atomically (outfile.Replace): the
// bytes go to a new hidden file beside it, which is then renamed over the previous dump, so a
// reader never sees a half-written file and a failure leaves the previous dump whole; the
// rename replaces a name, never follows one, and the directory is the one opened and checked
// once for this process, whatever its path names later. It returns the dump's path. For tools
// and tests that write dumps of their own making; the plugin writes through a Writer.
func Write(dir string, d *Dump) (string, error) {
	b, err := Marshal(d)
	if err != nil {
		return "", err
	}
	return outfile.Replace(dir, FileName(d.Host, d.PID), b)
}

// A Writer writes one process's dumps into Dir. The first dump claims a name of its own, created
// new: FileName(host, pid), or when that is taken ncclprof-hang-<host>-<pid>.N.json (processes
// of containers with their own PID namespaces sharing a host name and a directory; a name
// another user created first in a shared sticky directory such as /tmp, which this process
// could neither replace nor should), and when all of those are taken a name with a random
// number. Later dumps replace the claimed file atomically (as Write does); a rewrite that fails
// (every temporary name taken, or the name taken over: a sticky directory then refuses the
// rename) claims a new name instead. The plugin calls it from its
// own goroutine, never from NCCL's threads.
type Writer struct {
	Dir  string
	name string // claimed by the first dump ("" until then)
}

// Write writes d (see Writer) and returns the dump's path.
func (w *Writer) Write(d *Dump) (string, error) {
	b, err := Marshal(d)
	if err != nil {
		return "", err
	}
	if w.name != "" {
		if p, err := outfile.Replace(w.Dir, w.name, b); err == nil {
			return p, nil
		}
	}
	base := strings.TrimSuffix(FileName(d.Host, d.PID), FileSuffix)
	p, err := outfile.WriteNew(w.Dir, base, FileSuffix, b)
	for try := 0; errors.Is(err, outfile.ErrNamesTaken) && try < 8; try++ {
		p, err = outfile.WriteNew(w.Dir, fmt.Sprintf("%s.%d", base, 1000+rand.IntN(1e9)), FileSuffix, b)
	}
	if err == nil {
		w.name = filepath.Base(p)
	}
	return p, err
}
