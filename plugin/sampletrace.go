package main

/*
#include "core.h"
*/
import "C"

import (
	"path/filepath"
	"time"

	"github.com/ncclprof/ncclprof/internal/aggregate"
	"github.com/ncclprof/ncclprof/internal/event"
	"github.com/ncclprof/ncclprof/internal/outfile"
)

// The sampled trace's side of the trace writer: what it writes of a record the sampler judged,
// and its files. A sampled trace runs for as long as the job, so its files rotate: once the
// current file reaches about half of NCCLPROF_TRACE_MAX_MB it is completed (closing metadata and
// all: valid JSON, as after every flush) and a new one starts, and the oldest files are deleted
// so that what is on disk stays under the bound.

const (
	// sampleRetry: after a write error (a full disk) the sampled trace tries a new file this
	// much later.
	sampleRetry = time.Minute
	// rotationLagNs: a file after the first starts this long before it opened, so events still
	// in flight (read up to a window period and a grace late) keep their place in it; an event
	// older than that when read is counted as skipped.
	rotationLagNs = int64(60e9)
)

// rotation is the bookkeeping of the sampled trace's files.
type rotation struct {
	done     []doneFile // completed files still on disk, oldest first
	lastBase int64      // baseTimeNanoseconds of the latest file
	deleted  uint64     // files deleted to stay under the bound
	failedAt time.Time
	// floor: the current file's size once it announced the communicators carried over (its own
	// metadata); events are what it holds beyond. warned: said that the metadata is large.
	floor  int64
	warned bool
}

type doneFile struct {
	path  string
	bytes int64
}

// base is a new file's baseTimeNanoseconds: from (the first file: the first communicator), or
// for a later file up to rotationLagNs before it opened, never before the previous file's base.
func (r *rotation) base(from int64) int64 {
	if r.lastBase == 0 {
		return from
	}
	return max(r.lastBase, from-rotationLagNs)
}

// opened notes a new file and deletes the oldest completed ones until they and a current file
// of up to half the bound fit in the bound.
func (r *rotation) opened(t *traceSink, base int64) {
	r.lastBase, r.floor = base, 0
	limit := t.sample.cfg.maxBytes
	for len(r.done) > 0 && r.onDisk()+limit/2 > limit {
		f := r.done[0]
		if err := outfile.Remove(filepath.Dir(f.path), filepath.Base(f.path)); err != nil {
			// Counted as still on disk; said once (it is the user's directory).
			if r.deleted == 0 {
				warnf("sampled trace: cannot delete %s to stay under NCCLPROF_TRACE_MAX_MB: %v", f.path, err)
			}
			break
		}
		r.done = r.done[1:]
		r.deleted++
	}
}

// closed notes a file completed (or abandoned after a write error: it stays valid on disk).
func (r *rotation) closed(path string, bytes int64) {
	r.done = append(r.done, doneFile{path, bytes})
}

// onDisk is what the completed files hold.
func (r *rotation) onDisk() int64 {
	var n int64
	for _, f := range r.done {
		n += f.bytes
	}
	return n
}

// write puts a record the sampler judged into the sampled trace: a sampled operation with the
// API events it leads back to (parents first, so its flows find them), or holds an API event.
func (t *traceSink) write(c aggregate.Comm, r *event.Record, v verdict) {
	switch v {
	case hold:
		t.sample.hold(c, r)
	case keep:
		if r.Type == event.Coll || r.Type == event.P2p {
			for _, a := range t.sample.ancestors(r) {
				t.emit(a.comm, &a.rec)
				t.sample.release(a)
			}
		}
		t.emit(c, r)
	}
}

// closeReserve is room left in a file for its closing metadata (counters, and a line per
// communicator), so that a file rotated at the threshold stays within half the bound.
func (t *traceSink) closeReserve() int64 { return 16<<10 + 512*int64(len(t.comms)) }

// maybeRotate completes the sampled trace's file once it reaches half the bound and starts
// the next, announcing in it the communicators the previous one had. A file first holds a
// quarter of the bound in events beyond its own metadata: with hundreds of communicators the
// metadata alone (a line per communicator, opening and closing) can approach half the bound,
// and rotating on that would write and delete a file per drainer pass.
func (t *traceSink) maybeRotate() {
	if t.sample == nil || t.w == nil {
		return
	}
	size, half := t.w.Bytes()+int64(t.w.Pending()), t.sample.cfg.maxBytes/2
	if size+t.closeReserve() < half || size-t.rot.floor < half/2 {
		return
	}
	prev := t.comms
	t.close()
	t.open(t.from)
	if t.w == nil {
		return
	}
	for i, inc := range prev {
		if c, ok := drainer.comms[i]; ok && c.Incarnation == inc {
			t.announce(c)
		}
	}
	t.rot.floor = t.w.Bytes() + int64(t.w.Pending())
	if meta := t.rot.floor + t.closeReserve(); meta >= half/2 && !t.rot.warned {
		t.rot.warned = true
		warnf("sampled trace: the metadata of %d communicators takes %d KiB of each file, over a quarter "+
			"of NCCLPROF_TRACE_MAX_MB=%d; each file now holds a quarter of the bound in events besides, so "+
			"files can pass half the bound. Raise NCCLPROF_TRACE_MAX_MB to at least %d",
			len(t.comms), meta>>10, t.sample.cfg.maxBytes>>20, (4*meta>>20)+1)
	}
}

// publishSampled makes the sampled trace's figures visible through ncclprof_stats.
func (t *traceSink) publishSampled() {
	by := t.rot.onDisk()
	if t.w != nil {
		by += t.w.Bytes()
	}
	n := &t.sample.total
	C.np_stat_set(C.NP_S_SAMPLED_FILES, C.uint64_t(t.files))
	C.np_stat_set(C.NP_S_SAMPLED_DELETED, C.uint64_t(t.rot.deleted))
	C.np_stat_set(C.NP_S_SAMPLED_BYTES, C.uint64_t(by))
	C.np_stat_set(C.NP_S_SAMPLED_OPS, C.uint64_t(n[cTraced]))
	C.np_stat_set(C.NP_S_SAMPLED_AWAY, C.uint64_t(n[cAway]))
	C.np_stat_set(C.NP_S_SAMPLED_TRIGGERS, C.uint64_t(n[cSlow]))
}
