package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Every command resolves its inputs here, so that the same input gives the same answer
// everywhere: a file named twice (twice on the command line, by a glob and by its name, through
// a symlink or another path) is one input, and no command writes over one of its inputs.

// fileID is a file's identity: its device and inode (os.SameFile's test), whatever its name.
type fileID struct {
	fi os.FileInfo
}

func identify(path string) (fileID, bool) {
	fi, err := os.Stat(path) // follows symlinks: a link and its target are one file
	return fileID{fi}, err == nil
}

// uniqueFiles keeps the first name of every file and drops the other names of the same file.
// Names that cannot be read are kept (opening them reports the error).
func uniqueFiles(paths []string) []string {
	var seen []fileID
	out := paths[:0:0]
	for _, p := range paths {
		id, ok := identify(p)
		if ok && containsFile(seen, id) {
			continue
		}
		if ok {
			seen = append(seen, id)
		}
		out = append(out, p)
	}
	return out
}

func containsFile(ids []fileID, id fileID) bool {
	for _, s := range ids {
		if os.SameFile(s.fi, id.fi) {
			return true
		}
	}
	return false
}

// refuseOverwrite returns an error when out is one of the inputs (the same file under any name,
// symlinks included): writing it would destroy the input before or while it is read.
func refuseOverwrite(flag, out string, inputs ...[]string) error {
	if out == "" {
		return nil
	}
	id, ok := identify(out)
	if !ok {
		return nil // out does not exist yet: it cannot be an input
	}
	for _, list := range inputs {
		for _, in := range list {
			if inID, ok := identify(in); ok && os.SameFile(id.fi, inID.fi) {
				return fmt.Errorf("%s %s is the input %s: writing it would destroy that trace; choose another output file", flag, out, in)
			}
		}
	}
	return nil
}

// refuseSameOutput returns an error when out names the same file as one of another flag's outputs,
// existing or not yet (the same path spelt differently, or through a link): the second write
// would replace the first, and the command would end as if both had been written.
func refuseSameOutput(flag, out, otherFlag string, others []string) error {
	for _, o := range others {
		if sameOutput(out, o) {
			return fmt.Errorf("%s %s is also the %s output %s: both would be written to one file and one lost; choose another file for %s", flag, out, otherFlag, o, flag)
		}
	}
	return nil
}

// sameOutput says whether two output paths name one file: the same absolute path, the same
// existing file, or the same name in the same directory.
func sameOutput(a, b string) bool {
	if sameFile(a, b) {
		return true
	}
	aa, errA := filepath.Abs(a)
	ab, errB := filepath.Abs(b)
	if errA == nil && errB == nil && aa == ab {
		return true
	}
	return filepath.Base(a) == filepath.Base(b) && sameFile(filepath.Dir(a), filepath.Dir(b))
}

// checkOutput refuses an output file that is one of the inputs, or a directory where a file is
// wanted (example: a file name to suggest inside it).
func checkOutput(flag, out, example string, inputs ...[]string) error {
	if st, err := os.Stat(out); err == nil && st.IsDir() {
		return fmt.Errorf("%s %s is a directory: give the file to write, e.g. %s %s", flag, out, flag, filepath.Join(out, example))
	}
	return refuseOverwrite(flag, out, inputs...)
}

// parsePairs reads --pair KINETO=NCCL[,NCCL...] arguments into Kineto path → plugin paths.
// Pairs naming the same Kineto file (by any name) are one, and each plugin file is listed once.
func parsePairs(pairs []string) (map[string][]string, error) {
	if len(pairs) == 0 {
		return nil, nil
	}
	out := map[string][]string{}
	var keys []string
	for _, p := range pairs {
		k, n, ok := strings.Cut(p, "=")
		if !ok || k == "" || n == "" {
			return nil, fmt.Errorf("--pair %q: want KINETO=NCCL[,NCCL...]", p)
		}
		for _, seen := range keys {
			if sameFile(seen, k) {
				k = seen
			}
		}
		if _, ok := out[k]; !ok {
			keys = append(keys, k)
		}
		out[k] = uniqueFiles(append(out[k], strings.Split(n, ",")...))
	}
	return out, nil
}

func sameFile(a, b string) bool {
	if filepath.Clean(a) == filepath.Clean(b) {
		return true
	}
	ia, okA := identify(a)
	ib, okB := identify(b)
	return okA && okB && os.SameFile(ia.fi, ib.fi)
}
