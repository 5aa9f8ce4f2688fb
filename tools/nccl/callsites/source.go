package main

import (
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// Release is what one NCCL source tree says about the profiler: its call sites and the
// profiler ABI versions it can load (ncclProfiler_vN symbols it looks up).
type Release struct {
	Tag   string
	ABI   []int
	Sites []Site
}

// skipped are files that mention ncclProfiler but call no plugin on NCCL's behalf: the ABI
// headers, and the adapters that turn the newest ABI into an older plugin's (read for the
// ABI versions only).
func skipped(path string) bool {
	return strings.HasPrefix(path, "src/include/plugin/") || strings.HasPrefix(path, "src/plugin/profiler/")
}

var symbolRe = regexp.MustCompile(`"ncclProfiler_v(\d+)"`)

// fromFiles scans the named files, read by read.
func fromFiles(tag string, paths []string, read func(string) (string, error)) (*Release, error) {
	r := &Release{Tag: tag}
	abi := map[int]bool{}
	for _, p := range paths {
		src, err := read(p)
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", p, err)
		}
		for _, m := range symbolRe.FindAllStringSubmatch(src, -1) {
			n, _ := strconv.Atoi(m[1])
			abi[n] = true
		}
		if !skipped(p) {
			r.Sites = append(r.Sites, scanFile(p, src)...)
		}
	}
	for n := range abi {
		r.ABI = append(r.ABI, n)
	}
	sort.Ints(r.ABI)
	sortSites(r.Sites)
	if len(r.Sites) == 0 {
		return nil, fmt.Errorf("no profiler call sites found in %s: is it NCCL's source tree (2.23 or later)?", tag)
	}
	return r, nil
}

// FromGit reads a tag (or any commit) of a local NCCL clone, no work tree needed.
func FromGit(repo, tag string) (*Release, error) {
	out, err := exec.Command("git", "-C", repo, "grep", "-l", "ncclProfiler", tag, "--", "src").Output()
	if err != nil {
		return nil, fmt.Errorf("git grep in %s at %s: %v (is %s a clone of NVIDIA/nccl with tag %s?)", repo, tag, err, repo, tag)
	}
	var paths []string
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		paths = append(paths, strings.TrimPrefix(l, tag+":"))
	}
	return fromFiles(tag, paths, func(p string) (string, error) {
		b, err := exec.Command("git", "-C", repo, "show", tag+":"+p).Output()
		return string(b), err
	})
}

// FromDir reads a checked-out (or unpacked) NCCL tree.
func FromDir(dir, tag string) (*Release, error) {
	var paths []string
	err := filepath.WalkDir(filepath.Join(dir, "src"), func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err == nil && strings.Contains(string(b), "ncclProfiler") {
			rel, _ := filepath.Rel(dir, p)
			paths = append(paths, filepath.ToSlash(rel))
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w (give the NCCL tree's top directory, the one holding src/)", dir, err)
	}
	sort.Strings(paths)
	return fromFiles(tag, paths, func(p string) (string, error) {
		b, err := os.ReadFile(filepath.Join(dir, p))
		return string(b), err
	})
}
