package main

import (
	"regexp"
	"sort"
	"strings"
)

// Site is one profiler call in NCCL's sources: which function of which file calls what, for
// which event type, how often (Lines holds where, for the reader; diffs ignore it).
type Site struct {
	File, Func, Call, Event string
	N                       int
	Lines                   []int
}

// Key is what a diff compares: a site moved within its function is not a change, one added or
// removed (or called a different number of times) is.
func (s Site) Key() string {
	return strings.Join([]string{s.File, s.Func, s.Call, s.Event, itoa(s.N)}, "\t")
}

// token is a C++ token as far as the scan needs: identifiers, and single punctuation
// characters (with "->" and "::" kept whole).
type token struct {
	text string
	line int
}

// lex strips comments, string and character literals and preprocessor lines (their braces
// would unbalance the count; NCCL calls the profiler from no macro) and splits the rest.
func lex(src string) []token {
	var out []token
	line := 1
	atLineStart := true
	for i := 0; i < len(src); {
		c := src[i]
		switch {
		case c == '\n':
			line++
			atLineStart = true
			i++
			continue
		case c == ' ' || c == '\t' || c == '\r':
			i++
			continue
		case c == '#' && atLineStart:
			for i < len(src) && src[i] != '\n' { // a directive, with its continuations
				if src[i] == '\\' && i+1 < len(src) && src[i+1] == '\n' {
					line++
					i++
				}
				i++
			}
			continue
		case strings.HasPrefix(src[i:], "//"):
			for i < len(src) && src[i] != '\n' {
				i++
			}
			continue
		case strings.HasPrefix(src[i:], "/*"):
			end := strings.Index(src[i+2:], "*/")
			if end < 0 {
				end = len(src) - i - 4
			}
			line += strings.Count(src[i:i+2+end], "\n")
			i += end + 4
			continue
		case c == '"' || c == '\'':
			j := i + 1
			for j < len(src) && src[j] != c && src[j] != '\n' {
				if src[j] == '\\' {
					j++
				}
				j++
			}
			out = append(out, token{"\"\"", line})
			i = j + 1
			atLineStart = false
			continue
		}
		atLineStart = false
		if isIdent(c) {
			j := i
			for j < len(src) && isIdent(src[j]) {
				j++
			}
			out = append(out, token{src[i:j], line})
			i = j
			continue
		}
		if strings.HasPrefix(src[i:], "->") || strings.HasPrefix(src[i:], "::") {
			out = append(out, token{src[i : i+2], line})
			i += 2
			continue
		}
		out = append(out, token{src[i : i+1], line})
		i++
	}
	return out
}

func isIdent(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

var (
	wrapperName = regexp.MustCompile(`^ncclProfiler[A-Z]\w*$`)
	typeName    = regexp.MustCompile(`^ncclProfile(Group|Coll|P2p|ProxyOp|ProxyStep|ProxyCtrl|KernelCh|NetPlugin|GroupApi|CollApi|P2pApi|KernelLaunch|CeColl|CeSync|CeBatch)$`)
	// The plugin's table is a pointer named ncclProfiler in every release; its methods are
	// the ABI (init, startEvent, stopEvent, recordEventState, finalize).
	tableMethods = map[string]bool{"init": true, "startEvent": true, "stopEvent": true, "recordEventState": true, "finalize": true}
)

// scanFile returns the profiler calls made inside the functions of one file. A call is an
// identifier ncclProfilerXxx followed by "(" (a wrapper of src/plugin/profiler.cc, or the
// NetPlugin callback ncclProfilerFunction), or ncclProfiler->method( (the plugin's own table,
// called only inside the wrappers).
func scanFile(path, src string) []Site {
	toks := lex(src)
	sites := map[string]*Site{}
	var stack []bool // per open brace: does it count (false: namespace, extern "C")
	depth := 0
	var head []token // tokens at depth 0 since the last ; { or }
	fn := ""
	lastType := "" // the last event type a descriptor was given in this function
	add := func(call, event string, line int) {
		s := Site{File: path, Func: fn, Call: call, Event: event}
		k := s.File + "\x00" + s.Func + "\x00" + s.Call + "\x00" + s.Event
		if sites[k] == nil {
			sites[k] = &s
		}
		sites[k].N++
		sites[k].Lines = append(sites[k].Lines, line)
	}
	for i, t := range toks {
		switch t.text {
		case "{":
			if depth == 0 {
				counts, name := classify(head)
				stack = append(stack, counts)
				if counts {
					depth++
					fn, lastType = name, ""
				}
				head = head[:0]
				continue
			}
			stack = append(stack, true)
			depth++
			continue
		case "}":
			if len(stack) > 0 {
				if stack[len(stack)-1] {
					depth--
				}
				stack = stack[:len(stack)-1]
			}
			if depth == 0 {
				head = head[:0]
			}
			continue
		case ";":
			if depth == 0 {
				head = head[:0]
				continue
			}
		}
		if depth == 0 {
			head = append(head, t)
			continue
		}
		if typeName.MatchString(t.text) && i > 0 && toks[i-1].text == "=" {
			lastType = strings.TrimPrefix(t.text, "ncclProfile")
		}
		next := func(k int) string {
			if i+k < len(toks) {
				return toks[i+k].text
			}
			return ""
		}
		if t.text == "ncclProfiler" && next(1) == "->" && tableMethods[next(2)] && next(3) == "(" {
			ev := eventOf(fn)
			if next(2) == "startEvent" && lastType != "" {
				ev = lastType
			}
			add("plugin."+next(2), ev, t.line)
			continue
		}
		if wrapperName.MatchString(t.text) && next(1) == "(" && fn != "" && (i == 0 || (toks[i-1].text != "->" && toks[i-1].text != ".")) {
			add(t.text, eventOf(t.text), t.line)
		}
	}
	out := make([]Site, 0, len(sites))
	for _, s := range sites {
		out = append(out, *s)
	}
	sortSites(out)
	return out
}

// classify says whether a brace opened at file scope opens a function (and its name) or a
// scope that is transparent (namespace, extern "C"). Other braces (struct bodies,
// initializers) count as depth with no function name.
func classify(head []token) (counts bool, name string) {
	for _, t := range head {
		if t.text == "namespace" || t.text == "extern" {
			return false, ""
		}
	}
	paren := -1
	for k, t := range head {
		if t.text == "(" {
			paren = k
			break
		}
		if t.text == "=" || t.text == "struct" || t.text == "class" || t.text == "union" || t.text == "enum" {
			return true, ""
		}
	}
	if paren <= 0 {
		return true, ""
	}
	name = head[paren-1].text
	for k := paren - 2; k >= 1 && head[k].text == "::"; k -= 2 {
		name = head[k-1].text + "::" + name
	}
	return true, name
}

// eventOf names the event type a wrapper (or the function around a table call) is about,
// from its name: NCCL names every wrapper after its type.
func eventOf(fn string) string {
	for _, m := range []struct{ sub, ev string }{
		{"GroupApi", "GroupApi"}, {"CollApi", "CollApi"}, {"P2pApi", "P2pApi"},
		{"KernelLaunch", "KernelLaunch"}, {"KernelCh", "KernelCh"},
		{"CeColl", "CeColl"}, {"CeSync", "CeSync"}, {"CeBatch", "CeBatch"},
		{"ProxyOp", "ProxyOp"}, {"ProxyStep", "ProxyStep"}, {"ProxyCtrl", "ProxyCtrl"},
		{"TaskEvents", "Coll+P2p"}, {"Group", "Group"},
		{"ncclProfilerCallback", "NetPlugin"}, {"ncclProfilerFunction", "NetPlugin"},
		{"PluginInit", "init"}, {"PluginFinalize", "finalize"},
	} {
		if strings.Contains(fn, m.sub) {
			return m.ev
		}
	}
	return "-"
}

func sortSites(s []Site) {
	sort.Slice(s, func(a, b int) bool { return s[a].Key() < s[b].Key() })
}

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	var b []byte
	for ; n > 0; n /= 10 {
		b = append([]byte{byte('0' + n%10)}, b...)
	}
	return string(b)
}
