package hosttest

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
)

// A call log line (testhost/calllog.h): "T<tid> <kind> <key>=<ref> k=v …".
type callLine struct {
	n      int // line number, for messages
	tid    string
	kind   string // init, start, stop, record, finalize
	ref    string // the context (init, start, finalize) or handle (stop, record)
	fields []kv
}

type kv struct{ k, v string }

func (l *callLine) get(k string) string {
	for _, f := range l.fields {
		if f.k == k {
			return f.v
		}
	}
	return ""
}

func (l *callLine) without(keys ...string) []kv {
	var out []kv
next:
	for _, f := range l.fields {
		for _, k := range keys {
			if f.k == k {
				continue next
			}
		}
		out = append(out, f)
	}
	return out
}

func readCallLog(t *testing.T, path string) []callLine {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []callLine
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for n := 1; sc.Scan(); n++ {
		parts := strings.Fields(sc.Text())
		if len(parts) < 3 {
			t.Fatalf("%s:%d: %q", path, n, sc.Text())
		}
		l := callLine{n: n, tid: parts[0], kind: parts[1]}
		for i, p := range parts[2:] {
			k, v, _ := strings.Cut(p, "=")
			if i == 0 {
				l.ref = v
				continue
			}
			l.fields = append(l.fields, kv{k, v})
		}
		out = append(out, l)
	}
	return out
}

// chainOracle says what a plugin of version ver with activation mask mask, chained behind
// ncclprof, must have received for each call the host (NCCL of version abi) made: the same
// call, converted as NCCL's own adapters convert for an older plugin, with its own contexts
// and handles in place of ncclprof's.
type chainOracle struct {
	abi, ver, mask int
	ctx            map[string]string // host (ncclprof) context → the chained plugin's
	handle         map[string]string // host (ncclprof) handle → the chained plugin's
	issued         map[string]bool   // every handle ncclprof gave the host
	hostCtx        map[string]bool   // every context ncclprof gave the host
	checked        map[string]int    // calls compared, by kind
}

func typesOf(v int) int {
	switch {
	case v >= 6:
		return 0x7fff
	case v == 5:
		return 0xfff
	case v >= 3:
		return 0xff
	}
	return 0x3f
}

// maskWants is NCCL's activation rule (doc §2.5), written again here as the test's own oracle.
func maskWants(m int, t int) bool {
	const (
		group, coll, p2p, op, step, ctrl, kch, net        = 1, 2, 4, 8, 16, 32, 64, 128
		gapi, capi, papi, launch, ceColl, ceSync, ceBatch = 256, 512, 1024, 2048, 4096, 8192, 16384
	)
	below := op | step | kch | net
	ce := ceColl | ceSync | ceBatch
	switch t {
	case gapi:
		return m&(0x7fff&^ctrl) != 0
	case capi:
		return m&(capi|coll|below|ce) != 0
	case papi:
		return m&(papi|p2p|below) != 0
	case group:
		return m&(group|coll|p2p|below) != 0
	case coll:
		return m&(coll|below) != 0
	case p2p:
		return m&(p2p|below) != 0
	case op:
		return m&(op|step|net) != 0
	case step:
		return m&(step|net) != 0
	case ceColl:
		return m&ce != 0
	}
	return m&t != 0
}

// NCCL's v1 enums, in NCCL's order; an unknown name is the count.
var v1Enums = map[string][]string{
	"func":  {"Broadcast", "Reduce", "AllGather", "ReduceScatter", "AllReduce", "SendRecv", "Send", "Recv"},
	"dtype": {"ncclInt8", "ncclUint8", "ncclInt32", "ncclUint32", "ncclInt64", "ncclUint64", "ncclFloat16", "ncclFloat32", "ncclFloat64", "ncclBfloat16", "ncclFloat8e4m3", "ncclFloat8e5m2"},
	"algo":  {"TREE", "RING", "COLLNET_DIRECT", "COLLNET_CHAIN", "NVLS", "NVLS_TREE", "PAT"},
	"proto": {"LL", "LL128", "SIMPLE"},
}

func v1Enum(k, name string) string {
	for i, n := range v1Enums[k] {
		if n == name {
			return strconv.Itoa(i)
		}
	}
	return strconv.Itoa(len(v1Enums[k]))
}

// The keys a descriptor of version v has for Coll and P2p (calllog.c's names).
func collKeys(v int) []string {
	switch v {
	case 1:
		return strings.Fields("name hash seq func send recv count root dtype op traffic nch nwarps algo proto collnet nvls")
	case 2:
		return strings.Fields("name hash seq func send recv count root dtype traffic nch nwarps algo proto")
	case 3:
		return strings.Fields("name hash seq func send recv count root dtype nch nwarps algo proto")
	case 4:
		return strings.Fields("seq func send recv count root dtype nch nwarps algo proto")
	}
	return strings.Fields("seq func send recv count root dtype nch nwarps algo proto pgroup")
}

func p2pKeys(v int) []string {
	switch {
	case v <= 3:
		return strings.Fields("name hash func buff dtype count peer")
	case v == 4:
		return strings.Fields("func buff dtype count peer nch")
	}
	return strings.Fields("func buff dtype count peer nch pgroup")
}

// Values a field gets when the source version has none (NCCL's adapters write these).
var fieldDefaults = map[string]string{"name": "(null)", "hash": "0", "traffic": "0", "op": "0",
	"collnet": "0", "nvls": "0"}

// parent maps a parent the host passed to what the chained plugin must get: its own handle
// for one of ncclprof's, NULL for one of ncclprof's it never got, a foreign pointer as it is.
func (o *chainOracle) parent(v string) string {
	if h, ok := o.handle[v]; ok {
		return h
	}
	if v == "0" || o.issued[v] {
		return "0"
	}
	return v
}

// descr converts the host's start fields to the chained plugin's version.
func (o *chainOracle) descr(l *callLine, typ int) []kv {
	src := map[string]string{}
	for _, f := range l.fields {
		src[f.k] = f.v
	}
	parent := src["parent"]
	if (typ == 2 || typ == 4) && o.abi >= 5 && o.ver <= 4 {
		parent = src["pgroup"] // NCCL's adapters give older plugins the Group as parent
	}
	parent = o.parent(parent) // a PXN op's parent is another process's: not one ncclprof issued
	out := []kv{{"type", src["type"]}, {"parent", parent}, {"rank", src["rank"]}}
	var keys []string
	switch typ {
	case 2:
		keys = collKeys(o.ver)
	case 4:
		keys = p2pKeys(o.ver)
	case 64:
		keys = []string{"ch"}
		if o.ver >= 4 {
			keys = append(keys, "ptimer")
		}
	default: // the same in every version that has the type
		for _, f := range l.without("type", "parent", "rank", "h") {
			keys = append(keys, f.k)
		}
	}
	for _, k := range keys {
		v, ok := src[k]
		if !ok {
			v = fieldDefaults[k]
		}
		if k == "pgroup" {
			v = o.parent(v)
		}
		if o.ver == 1 && o.abi > 1 && v1Enums[k] != nil {
			v = v1Enum(k, v)
		}
		out = append(out, kv{k, v})
	}
	return out
}

// args converts the host's state arguments; ok false when NCCL would not pass the state on.
func (o *chainOracle) args(s int, fields []kv) ([]kv, bool) {
	if o.abi <= 3 || o.ver >= 6 || o.ver == o.abi {
		return fields, true
	}
	if o.ver >= 4 {
		if (o.ver == 4 && s > 22) || (o.ver == 5 && s >= 25) {
			return nil, false
		}
		if len(fields) == 1 && fields[0] == (kv{"args", "null"}) { // the v5 adapter's own args
			return []kv{{"args", "-"}}, true
		}
		return fields, true
	}
	switch {
	case s >= 13 && s <= 18:
		return []kv{{"appended", fields[0].v}}, true
	case s >= 8 && s <= 12:
		return []kv{{"args", "-"}}, true
	}
	return nil, false
}

// expect returns the line the chained plugin must have logged for a host line, or nil.
func (o *chainOracle) expect(l *callLine) *callLine {
	e := &callLine{tid: l.tid, kind: l.kind}
	switch l.kind {
	case "init":
		if l.ref == "0" {
			return nil
		}
		e.fields = l.fields
		if o.ver <= 3 {
			e.fields = nil
		}
	case "finalize":
		c, ok := o.ctx[l.ref]
		if !ok || (c == "0" && o.abi >= 5) {
			return nil
		}
		e.ref = c
	case "start":
		typ, _ := strconv.Atoi(l.get("type"))
		if typesOf(o.ver)&typ == 0 || !maskWants(o.mask&typesOf(o.ver), typ) {
			return nil
		}
		c, ours := o.ctx[l.ref]
		if !ours && (l.ref == "0" || o.hostCtx[l.ref]) {
			return nil // a communicator ncclprof does not profile, or not chained
		}
		if !ours {
			c = l.ref // another process's context (PXN), as NCCL passes it
		}
		e.ref = c
		e.fields = o.descr(l, typ)
		p := e.fields[1].v
		if p == "0" && (typ == 8192 || typ == 16384 || ((typ == 2 || typ == 4) && o.abi <= 4)) {
			return nil // NCCL starts these only under a parent handle
		}
	case "stop", "record":
		h, ok := o.handle[l.ref]
		if !ok {
			return nil
		}
		e.ref = h
		e.fields = l.fields
		if l.kind == "record" {
			s, _ := strconv.Atoi(l.get("s"))
			a, ok := o.args(s, l.fields[1:])
			if !ok {
				return nil
			}
			e.fields = append([]kv{l.fields[0]}, a...)
		}
	}
	return e
}

func sameFields(a, b []kv) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func fmtFields(fs []kv) string {
	var b strings.Builder
	for _, f := range fs {
		fmt.Fprintf(&b, " %s=%s", f.k, f.v)
	}
	return b.String()
}

// checkChained compares the host's call log with the chained recorder's, call by call on each
// thread, and returns how many calls of each kind the recorder got.
func checkChained(t *testing.T, hostLog, recLog string, abi, ver, mask int) map[string]int {
	t.Helper()
	host, rec := readCallLog(t, hostLog), readCallLog(t, recLog)
	byThread := map[string][]callLine{}
	for _, l := range rec {
		byThread[l.tid] = append(byThread[l.tid], l)
	}
	next := map[string]int{}
	o := &chainOracle{abi: abi, ver: ver, mask: mask, ctx: map[string]string{},
		handle: map[string]string{}, issued: map[string]bool{}, hostCtx: map[string]bool{},
		checked: map[string]int{}}
	errs := 0
	fail := func(format string, a ...any) {
		if errs++; errs <= 10 {
			t.Errorf(format, a...)
		}
	}
	for i := range host {
		l := &host[i]
		if l.kind == "start" {
			o.issued[l.get("h")] = true
		}
		if l.kind == "init" {
			o.hostCtx[l.ref] = true
		}
		e := o.expect(l)
		if e == nil {
			continue
		}
		q := byThread[l.tid]
		if next[l.tid] >= len(q) {
			fail("host line %d (%s %s%s): the chained plugin got nothing", l.n, l.kind, l.ref, fmtFields(l.fields))
			continue
		}
		r := &q[next[l.tid]]
		next[l.tid]++
		got := r.fields
		switch l.kind {
		case "init":
			o.ctx[l.ref] = r.ref
			got = r.without("mask")
			e.ref = r.ref
		case "start":
			o.handle[l.get("h")] = r.get("h")
			got = r.without("h")
		}
		if r.kind != e.kind || r.ref != e.ref || !sameFields(got, e.fields) {
			fail("host line %d, recorder line %d:\n host     %s %s%s\n expected %s %s%s\n got      %s %s%s",
				l.n, r.n, l.kind, l.ref, fmtFields(l.fields), e.kind, e.ref, fmtFields(e.fields),
				r.kind, r.ref, fmtFields(got))
		}
		o.checked[l.kind]++
	}
	for tid, q := range byThread {
		if n := len(q) - next[tid]; n > 0 {
			fail("the chained plugin got %d calls on thread %s that the host never made, first: line %d %s %s%s",
				n, tid, q[next[tid]].n, q[next[tid]].kind, q[next[tid]].ref, fmtFields(q[next[tid]].fields))
		}
	}
	if errs > 10 {
		t.Errorf("… %d mismatches in all", errs)
	}
	return o.checked
}
