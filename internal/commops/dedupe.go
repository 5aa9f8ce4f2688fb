package commops

import "fmt"

// keepMembers records, for the kernel groups finish kept (moved: old index → new, -1 dropped),
// the handles of the operations each took in, for dedupe.
func (r *reader) keepMembers(moved []int32) {
	for k, i := range r.keys {
		if moved[i] >= 0 {
			continue
		}
		if g, ok := r.groupOf[i]; ok && moved[g] >= 0 {
			if r.p.members == nil {
				r.p.members = map[int32][]uint64{}
			}
			r.p.members[moved[g]] = append(r.p.members[moved[g]], k.handle)
		}
	}
}

// procKey is a process across files: its host and pid.
type procKey struct {
	host string
	pid  int64
}

// dedupe drops from the parts the operations another part already holds, so that none is
// counted twice: the directory ncclprof.profile leaves holds each rank's plugin trace and its
// merged output, which carries the same plugin events. An operation is the same when its
// process (host, pid) and its plugin handle are (handles are unique within a process); the copy
// kept is the best timed (byPreference). Only processes found in several files are looked at.
// It returns how many it dropped.
func dedupe(parts []*part) int {
	files := map[procKey]int{}
	for _, p := range parts {
		seen := map[procKey]bool{}
		for _, pr := range p.procs {
			if k := (procKey{pr.Host, pr.Pid}); !seen[k] {
				seen[k] = true
				files[k]++
			}
		}
	}
	shared := false
	for _, n := range files {
		shared = shared || n > 1
	}
	if !shared {
		return 0
	}
	type opID struct {
		proc   procKey
		handle uint64
	}
	held := map[opID]bool{}
	dropped := 0
	for _, p := range byPreference(parts) {
		kept := 0
		for i := range p.ops {
			pr := p.procs[p.ops[i].Proc]
			k := procKey{pr.Host, pr.Pid}
			if files[k] < 2 {
				p.ops[kept] = p.ops[i]
				kept++
				continue
			}
			ids := p.members[int32(i)]
			if h := p.ops[i].Handle; h != 0 {
				ids = append([]uint64{h}, ids...)
			}
			dup := false
			for _, h := range ids {
				dup = dup || held[opID{k, h}]
			}
			if dup {
				dropped++
				continue
			}
			for _, h := range ids {
				held[opID{k, h}] = true
			}
			p.ops[kept] = p.ops[i]
			kept++
		}
		p.ops = p.ops[:kept]
	}
	return dropped
}

// byPreference orders the parts whose copy of an operation is the one to keep first: those
// with operations timed by their kernel (merged outputs), then full traces, then sampled ones
// (whose operations stand for N: the full trace's copy counts each once); else in input order.
func byPreference(parts []*part) []*part {
	var kernel, full, sampled []*part
	for _, p := range parts {
		timed, isFull := false, len(p.ops) == 0
		for i := range p.ops {
			timed = timed || p.ops[i].Source == Kernel
			isFull = isFull || p.ops[i].Traced == Full
		}
		switch {
		case timed:
			kernel = append(kernel, p)
		case isFull:
			full = append(full, p)
		default:
			sampled = append(sampled, p)
		}
	}
	return append(append(kernel, full...), sampled...)
}

// duplicateNote says what dedupe did, for the outputs' notes.
func duplicateNote(n int) string {
	return fmt.Sprintf("%d operations were in two inputs (a process's plugin trace and its merged output, its full and its sampled trace, or two merged outputs of it): each is counted once, from the merged output if any, else the full trace", n)
}
