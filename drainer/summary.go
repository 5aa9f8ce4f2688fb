package main

/*
#include "core.h"
*/
import "C"

import (
	"cmp"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"sync"

	"github.com/ncclprof/ncclprof/internal/aggregate"
	"github.com/ncclprof/ncclprof/internal/event"
	"github.com/ncclprof/ncclprof/internal/linfit"
	"github.com/ncclprof/ncclprof/internal/outfile"
)

// counterNames are the counters' names from the plugin's one list (np_counter_names in
// control.c), which Python reads too. A counter without a name there (a test fails) is reported
// as counter_<i> rather than lost. Read at first use, not at package initialisation: the C
// library hands the Go side its functions only when it starts the drainer (drainapi.h).
var counterNames = sync.OnceValue(func() (names [C.NP_C_COUNT]string) {
	for i := range names {
		if p := C.ncclprof_counter_name(C.int(i)); p != nil {
			names[i] = C.GoString(p)
		} else {
			names[i] = fmt.Sprintf("counter_%d", i)
		}
	}
	return names
})

// counters reads the process-wide counters by name.
func counters() map[string]uint64 {
	var raw [C.NP_C_COUNT]C.uint64_t
	C.np_counters_read(&raw[0])
	m := make(map[string]uint64, len(raw))
	for i, v := range raw {
		m[counterNames()[i]] = uint64(v)
	}
	return m
}

// outputDir is where summaries (and metrics files) go: NCCLPROF_OUTPUT_DIR, default
// ./ncclprof-out.
func outputDir() string {
	if d := os.Getenv("NCCLPROF_OUTPUT_DIR"); d != "" {
		return d
	}
	return "ncclprof-out"
}

// summaryWriter writes one JSON file per communicator when NCCL finalizes it.
type summaryWriter struct {
	host    string
	failed  bool // warned once; later failures are counted only
	written uint64
	errors  uint64
}

func newSummaryWriter() *summaryWriter {
	h, _ := os.Hostname()
	return &summaryWriter{host: h}
}

func (w *summaryWriter) window(aggregate.Comm, []event.Record) {}

func (w *summaryWriter) finalized(r *aggregate.Result) {
	if os.Getenv("NCCLPROF_SUMMARY") == "0" {
		return
	}
	b, err := json.MarshalIndent(summarize(w.host, r), "", " ")
	if err == nil {
		err = w.write(r.Comm, b)
	}
	if err != nil {
		w.errors++
		if !w.failed {
			w.failed = true
			warnf("cannot write the communicator summary (%v); set NCCLPROF_OUTPUT_DIR to a "+
				"writable directory. The job continues; later failures are only counted.", err)
		}
		return
	}
	w.written++
}

// write puts the summary in a new file, whole or not at all (a full disk leaves no partial or
// empty summary: outfile.WriteNew).
func (w *summaryWriter) write(c aggregate.Comm, b []byte) error {
	_, err := outfile.WriteNew(outputDir(),
		fmt.Sprintf("ncclprof-summary-%s-%d-%016x-r%d", w.host, os.Getpid(), c.Hash, c.Rank), ".json",
		append(b, '\n'))
	return err
}

type summaryJSON struct {
	Version  int               `json:"ncclprof_summary_version"`
	Host     string            `json:"host"`
	PID      int               `json:"pid"`
	Comm     commJSON          `json:"comm"`
	Ops      []opJSON          `json:"operations"`
	Pairs    []pairJSON        `json:"rank_pairs"`
	Channels []channelJSON     `json:"channels"`
	Health   aggregate.Health  `json:"health"`
	Counters map[string]uint64 `json:"process_counters"`
	// Complete is false when some figure above is partial; Partial says which and why.
	Complete bool     `json:"complete"`
	Partial  []string `json:"partial"`
}

type commJSON struct {
	Hash   string `json:"comm_hash"`
	Name   string `json:"name"`
	Rank   int    `json:"rank"`
	NRanks int    `json:"nranks"`
	NNodes int    `json:"nnodes"`
	ABI    int    `json:"abi_version"`
}

type opJSON struct {
	Func      string `json:"func"`
	Algo      string `json:"algo"`
	Proto     string `json:"proto"`
	NChannels int    `json:"nchannels"`
	*aggregate.OpStats
}

type pairJSON struct {
	Rank int `json:"rank"`
	Peer int `json:"peer"`
	*aggregate.PairStats
	FitAvg linfit.Result `json:"fit_avg"`
	FitMin linfit.Result `json:"fit_min"`
}

type channelJSON struct {
	Rank    int `json:"rank"`
	Channel int `json:"channel"`
	*aggregate.ChannelStats
	FitMin linfit.Result `json:"fit_min"`
}

func summarize(host string, r *aggregate.Result) summaryJSON {
	s := summaryJSON{Version: 1, Host: host, PID: os.Getpid(), Health: r.Health, Counters: counters(),
		Comm: commJSON{Hash: fmt.Sprintf("0x%016x", r.Comm.Hash), Name: r.Comm.Name,
			Rank: r.Comm.Rank, NRanks: r.Comm.NRanks, NNodes: r.Comm.NNodes, ABI: r.Comm.ABI},
		Ops: []opJSON{}, Pairs: []pairJSON{}, Channels: []channelJSON{}, Partial: r.Partial()}
	if s.Partial == nil {
		s.Partial = []string{}
	}
	s.Complete = len(s.Partial) == 0
	for k, v := range r.Ops {
		s.Ops = append(s.Ops, opJSON{Func: k.Func, Algo: k.Algo, Proto: k.Proto, NChannels: k.NChannels, OpStats: v})
	}
	slices.SortFunc(s.Ops, func(a, b opJSON) int {
		return cmp.Or(cmp.Compare(a.Func, b.Func), cmp.Compare(a.Algo, b.Algo),
			cmp.Compare(a.Proto, b.Proto), cmp.Compare(a.NChannels, b.NChannels))
	})
	for k, v := range r.Pairs {
		avg, mn := v.Fits()
		s.Pairs = append(s.Pairs, pairJSON{Rank: k.Rank, Peer: k.Peer, PairStats: v, FitAvg: avg, FitMin: mn})
	}
	slices.SortFunc(s.Pairs, func(a, b pairJSON) int {
		return cmp.Or(cmp.Compare(a.Rank, b.Rank), cmp.Compare(a.Peer, b.Peer))
	})
	for k, v := range r.Channels {
		s.Channels = append(s.Channels, channelJSON{Rank: k.Rank, Channel: k.Channel, ChannelStats: v,
			FitMin: v.Fit.Fit(linfit.MIN)})
	}
	slices.SortFunc(s.Channels, func(a, b channelJSON) int {
		return cmp.Or(cmp.Compare(a.Rank, b.Rank), cmp.Compare(a.Channel, b.Channel))
	})
	return s
}
