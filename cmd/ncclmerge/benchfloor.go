package main

import (
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"
	"slices"
	"time"
)

// mergeRun is one merge and the floors measured just before it.
type mergeRun struct {
	read, copy, merge float64 // wall seconds
	cpu, rss          float64 // the merge's CPU seconds and peak RSS (MB)
}

// measureMerge times a plain read and a plain copy of the inputs (empty names skipped), then
// the merge (this program with args, in a child process).
func measureMerge(self string, args []string, out string, inputs []string) (mergeRun, error) {
	var r mergeRun
	var err error
	if r.read, err = plainRead(inputs); err != nil {
		return r, err
	}
	if r.copy, err = plainCopy(out, inputs); err != nil {
		return r, err
	}
	os.Remove(out)
	if r.merge, r.cpu, r.rss, err = timeSelf(self, args...); err != nil {
		return r, fmt.Errorf("merge failed: %w", err)
	}
	os.Remove(out)
	return r, nil
}

// plainRead reads each file into memory, as a tool that parses it must first.
func plainRead(paths []string) (float64, error) {
	t0 := time.Now()
	for _, p := range paths {
		if p == "" {
			continue
		}
		if _, err := os.ReadFile(p); err != nil {
			return 0, err
		}
	}
	d := time.Since(t0).Seconds()
	runtime.GC()
	debug.FreeOSMemory()
	return d, nil
}

// plainCopy reads the files into memory and writes them to out, 1 MiB at a time as the merge
// writes: the least a tool that writes its input back does.
func plainCopy(out string, paths []string) (float64, error) {
	t0 := time.Now()
	f, err := os.Create(out)
	if err != nil {
		return 0, err
	}
	buf := make([]byte, 1<<20)
	for _, p := range paths {
		if p == "" {
			continue
		}
		in, err := os.Open(p)
		if err != nil {
			f.Close()
			return 0, err
		}
		_, err = io.CopyBuffer(struct{ io.Writer }{f}, struct{ io.Reader }{in}, buf) // no copy_file_range: through memory
		in.Close()
		if err != nil {
			f.Close()
			return 0, err
		}
	}
	if err := f.Close(); err != nil {
		return 0, err
	}
	return time.Since(t0).Seconds(), nil
}

// medianOf is the median of a measure over the runs.
func medianOf(runs []mergeRun, f func(mergeRun) float64) float64 {
	v := make([]float64, len(runs))
	for i, r := range runs {
		v[i] = f(r)
	}
	slices.Sort(v)
	return v[len(v)/2]
}

// mergeMedians: the median of each measure, the ratios the median of each run's own ratio
// (a run's merge against the floors measured just before it), the peak RSS the largest.
type mergeMedians struct {
	read, copy, merge, cpu, rss float64
	readRatio, copyRatio        float64
}

func medianRun(runs []mergeRun) mergeMedians {
	m := mergeMedians{
		read:      medianOf(runs, func(r mergeRun) float64 { return r.read }),
		copy:      medianOf(runs, func(r mergeRun) float64 { return r.copy }),
		merge:     medianOf(runs, func(r mergeRun) float64 { return r.merge }),
		cpu:       medianOf(runs, func(r mergeRun) float64 { return r.cpu }),
		readRatio: medianOf(runs, func(r mergeRun) float64 { return r.read / r.merge }),
		copyRatio: medianOf(runs, func(r mergeRun) float64 { return r.copy / r.merge }),
	}
	for _, r := range runs {
		m.rss = max(m.rss, r.rss)
	}
	return m
}
