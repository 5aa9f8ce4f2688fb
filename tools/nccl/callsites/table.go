package main

import (
	"bufio"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
)

// The two files the tool writes and reads are tab-separated with '#' lines for what is not a
// row. A release's rows (what `extract` prints):
//
//	# nccl <tag> abi <n> <n> ...
//	file  function  call  event  n  lines
//
// The map (docs/nccl-call-sites.tsv, what `map` prints): the tags in order, each tag's ABI
// versions, then one row per call site and run of consecutive tags that have it:
//
//	# tags <tag> <tag> ...
//	# abi <tag> <n> <n> ...
//	since  until  file  function  call  event  n

const rowsHeader = "file\tfunction\tcall\tevent\tn\tlines"
const mapHeader = "since\tuntil\tfile\tfunction\tcall\tevent\tn"

func writeRelease(w io.Writer, r *Release) {
	fmt.Fprintf(w, "# nccl %s abi%s\n%s\n", r.Tag, joinInts(r.ABI), rowsHeader)
	for _, s := range r.Sites {
		lines := make([]string, len(s.Lines))
		for i, l := range s.Lines {
			lines[i] = strconv.Itoa(l)
		}
		fmt.Fprintf(w, "%s\t%s\n", s.Key(), strings.Join(lines, ","))
	}
}

func joinInts(v []int) string {
	var b strings.Builder
	for _, n := range v {
		fmt.Fprintf(&b, " %d", n)
	}
	return b.String()
}

// readRelease reads what writeRelease wrote.
func readRelease(rd io.Reader) (*Release, error) {
	r := &Release{}
	sc := bufio.NewScanner(rd)
	for ln := 1; sc.Scan(); ln++ {
		line := sc.Text()
		if f := strings.Fields(line); len(f) >= 4 && f[0] == "#" && f[1] == "nccl" && f[3] == "abi" {
			r.Tag = f[2]
			for _, s := range f[4:] {
				n, err := strconv.Atoi(s)
				if err != nil {
					return nil, fmt.Errorf("line %d: ABI version %q is not a number", ln, s)
				}
				r.ABI = append(r.ABI, n)
			}
			continue
		}
		if line == "" || strings.HasPrefix(line, "#") || line == rowsHeader {
			continue
		}
		f := strings.Split(line, "\t")
		if len(f) < 5 {
			return nil, fmt.Errorf("line %d: want %q, got %q", ln, rowsHeader, line)
		}
		n, err := strconv.Atoi(f[4])
		if err != nil {
			return nil, fmt.Errorf("line %d: count %q is not a number", ln, f[4])
		}
		r.Sites = append(r.Sites, Site{File: f[0], Func: f[1], Call: f[2], Event: f[3], N: n})
	}
	if r.Tag == "" {
		return nil, fmt.Errorf("no '# nccl <tag> abi ...' line: not the output of `callsites extract`")
	}
	return r, sc.Err()
}

// Map is the call sites of several releases, each row valid over a run of tags.
type Map struct {
	Tags []string
	ABI  map[string][]int
	Rows []MapRow
}

type MapRow struct {
	Since, Until string
	Key          string // Site.Key()
}

// BuildMap merges releases given oldest first.
func BuildMap(rels []*Release) *Map {
	m := &Map{ABI: map[string][]int{}}
	open := map[string]int{} // key → its row, while the previous tag had it
	for _, r := range rels {
		m.Tags = append(m.Tags, r.Tag)
		m.ABI[r.Tag] = r.ABI
		now := map[string]int{}
		for _, s := range r.Sites {
			k := s.Key()
			if i, ok := open[k]; ok {
				m.Rows[i].Until = r.Tag
				now[k] = i
				continue
			}
			m.Rows = append(m.Rows, MapRow{Since: r.Tag, Until: r.Tag, Key: k})
			now[k] = len(m.Rows) - 1
		}
		open = now
	}
	sort.SliceStable(m.Rows, func(a, b int) bool {
		if m.Rows[a].Key != m.Rows[b].Key {
			return m.Rows[a].Key < m.Rows[b].Key
		}
		return m.tagIndex(m.Rows[a].Since) < m.tagIndex(m.Rows[b].Since)
	})
	return m
}

func (m *Map) tagIndex(tag string) int {
	for i, t := range m.Tags {
		if t == tag {
			return i
		}
	}
	return -1
}

// At returns the keys of the sites the map holds for one of its tags.
func (m *Map) At(tag string) (map[string]bool, error) {
	i := m.tagIndex(tag)
	if i < 0 {
		return nil, fmt.Errorf("the map has no tag %s (it has %s)", tag, strings.Join(m.Tags, " "))
	}
	keys := map[string]bool{}
	for _, r := range m.Rows {
		if m.tagIndex(r.Since) <= i && i <= m.tagIndex(r.Until) {
			keys[r.Key] = true
		}
	}
	return keys, nil
}

func writeMap(w io.Writer, m *Map) {
	fmt.Fprintf(w, "# NCCL's profiler call sites, by tools/nccl/callsites (docs/nccl-call-sites.md says how to read and remake it)\n")
	fmt.Fprintf(w, "# tags %s\n", strings.Join(m.Tags, " "))
	for _, t := range m.Tags {
		fmt.Fprintf(w, "# abi %s%s\n", t, joinInts(m.ABI[t]))
	}
	fmt.Fprintln(w, mapHeader)
	for _, r := range m.Rows {
		fmt.Fprintf(w, "%s\t%s\t%s\n", r.Since, r.Until, r.Key)
	}
}

func readMap(rd io.Reader) (*Map, error) {
	m := &Map{ABI: map[string][]int{}}
	sc := bufio.NewScanner(rd)
	for ln := 1; sc.Scan(); ln++ {
		line := sc.Text()
		f := strings.Fields(line)
		switch {
		case len(f) >= 2 && f[0] == "#" && f[1] == "tags":
			m.Tags = f[2:]
			continue
		case len(f) >= 3 && f[0] == "#" && f[1] == "abi":
			for _, s := range f[3:] {
				n, err := strconv.Atoi(s)
				if err != nil {
					return nil, fmt.Errorf("line %d: ABI version %q is not a number", ln, s)
				}
				m.ABI[f[2]] = append(m.ABI[f[2]], n)
			}
			continue
		case line == "" || strings.HasPrefix(line, "#") || line == mapHeader:
			continue
		}
		cols := strings.SplitN(line, "\t", 3)
		if len(cols) != 3 || len(strings.Split(cols[2], "\t")) != 5 {
			return nil, fmt.Errorf("line %d: want %q, got %q", ln, mapHeader, line)
		}
		m.Rows = append(m.Rows, MapRow{Since: cols[0], Until: cols[1], Key: cols[2]})
	}
	if len(m.Tags) == 0 {
		return nil, fmt.Errorf("no '# tags ...' line: not a map written by `callsites map`")
	}
	for _, r := range m.Rows {
		if m.tagIndex(r.Since) < 0 || m.tagIndex(r.Until) < 0 {
			return nil, fmt.Errorf("row %q names a tag not in '# tags'", r.Key)
		}
	}
	return m, sc.Err()
}

// Diff lists what a release has that the map's tag has not (+) and the reverse (-), sorted
// by file and function so a reader sees each function's changes together.
func Diff(m *Map, against string, r *Release) ([]string, error) {
	old, err := m.At(against)
	if err != nil {
		return nil, err
	}
	now := map[string]bool{}
	for _, s := range r.Sites {
		now[s.Key()] = true
	}
	var out []string
	for k := range now {
		if !old[k] {
			out = append(out, "+\t"+k)
		}
	}
	for k := range old {
		if !now[k] {
			out = append(out, "-\t"+k)
		}
	}
	sort.Slice(out, func(a, b int) bool {
		if out[a][2:] != out[b][2:] {
			return out[a][2:] < out[b][2:]
		}
		return out[a] < out[b]
	})
	if a, b := joinInts(m.ABI[against]), joinInts(r.ABI); a != b {
		out = append([]string{fmt.Sprintf("abi\t%s:%s\t%s:%s", against, a, r.Tag, b)}, out...)
	}
	return out, nil
}
