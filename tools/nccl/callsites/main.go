// Command callsites finds every call NCCL makes to its profiler plugin, in a local clone or
// source tree of NCCL, and compares them with the project's map (docs/nccl-call-sites.tsv), so
// a new NCCL release's changes to the profiler's calls are found by reading a diff. It needs
// no network: give it a clone (git -C DIR show TAG:...) or an unpacked tree.
//
//	callsites extract --repo DIR --tag TAG      the rows of one release
//	callsites map --repo DIR TAG...             the map over several tags (oldest first)
//	callsites diff --repo DIR --tag TAG [--map FILE] [--against TAG]
//
// --src DIR reads an unpacked tree instead of --repo; diff also takes --rows FILE (what
// extract printed). diff exits 1 when the release differs from the map, 0 when it does not.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
)

const usage = `callsites: NCCL's calls to its profiler plugin, and how a release differs from the map.

  callsites extract (--repo DIR --tag TAG | --src DIR [--tag NAME])
      one release's call sites: file, function, call, event type, count, lines
  callsites map --repo DIR TAG...
      the map (docs/nccl-call-sites.tsv) over the tags, oldest first
  callsites diff (--repo DIR --tag TAG | --src DIR | --rows FILE) [--map FILE] [--against TAG]
      what the release has that the map's tag (--against, default the map's newest) has not (+),
      and the reverse (-); exit 1 when they differ

--repo is a clone of github.com/NVIDIA/nccl with its tags (no work tree needed); --src an
unpacked NCCL tree (the directory holding src/). Example, from this repository's top:
  go run ./tools/nccl/callsites diff --repo ~/nccl --tag v2.31.1-1
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(stdout, usage)
		return 0
	}
	fs := flag.NewFlagSet("callsites "+args[0], flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, usage) }
	repo := fs.String("repo", "", "a clone of NVIDIA/nccl")
	src := fs.String("src", "", "an unpacked NCCL source tree")
	tag := fs.String("tag", "", "the release: a tag of --repo, or a name for --src")
	rows := fs.String("rows", "", "diff: rows written by extract")
	mapFile := fs.String("map", "docs/nccl-call-sites.tsv", "diff: the map")
	against := fs.String("against", "", "diff: the map's tag to compare with (default its newest)")
	if err := fs.Parse(args[1:]); err != nil {
		return 2
	}
	fail := func(err error) int {
		fmt.Fprintln(stderr, "callsites:", err)
		return 2
	}
	switch args[0] {
	case "extract":
		r, err := release(*repo, *src, *tag, "")
		if err != nil {
			return fail(err)
		}
		writeRelease(stdout, r)
	case "map":
		if *repo == "" || fs.NArg() == 0 {
			return fail(fmt.Errorf("map needs --repo DIR and the tags, oldest first"))
		}
		var rels []*Release
		for _, t := range fs.Args() {
			r, err := FromGit(*repo, t)
			if err != nil {
				return fail(err)
			}
			rels = append(rels, r)
		}
		writeMap(stdout, BuildMap(rels))
	case "diff":
		return diff(*repo, *src, *tag, *rows, *mapFile, *against, stdout, stderr)
	default:
		fmt.Fprintf(stderr, "callsites: no command %q\n\n%s", args[0], usage)
		return 2
	}
	return 0
}

// release reads one release from whichever source was given.
func release(repo, src, tag, rows string) (*Release, error) {
	switch {
	case rows != "":
		f, err := os.Open(rows)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		return readRelease(f)
	case repo != "" && tag != "":
		return FromGit(repo, tag)
	case src != "":
		if tag == "" {
			tag = src
		}
		return FromDir(src, tag)
	}
	return nil, fmt.Errorf("say where NCCL's sources are: --repo DIR --tag TAG (a clone), or --src DIR (an unpacked tree)")
}

func diff(repo, src, tag, rows, mapFile, against string, stdout, stderr io.Writer) int {
	r, err := release(repo, src, tag, rows)
	if err != nil {
		fmt.Fprintln(stderr, "callsites:", err)
		return 2
	}
	f, err := os.Open(mapFile)
	if err != nil {
		fmt.Fprintf(stderr, "callsites: %v (run from the repository's top, or give --map)\n", err)
		return 2
	}
	defer f.Close()
	m, err := readMap(f)
	if err != nil {
		fmt.Fprintf(stderr, "callsites: %s: %v\n", mapFile, err)
		return 2
	}
	if against == "" {
		against = m.Tags[len(m.Tags)-1]
	}
	lines, err := Diff(m, against, r)
	if err != nil {
		fmt.Fprintln(stderr, "callsites:", err)
		return 2
	}
	fmt.Fprintf(stdout, "# %s against the map at %s: %d difference(s)\n", r.Tag, against, len(lines))
	for _, l := range lines {
		fmt.Fprintln(stdout, l)
	}
	if len(lines) > 0 {
		return 1
	}
	return 0
}
