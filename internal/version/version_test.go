package version

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/ncclprof/ncclprof/internal/testtraces"
)

// Every place that states the version says the same.
func TestOneVersion(t *testing.T) {
	root := testtraces.Root(t)
	for file, pattern := range map[string]string{
		"Makefile":                    `(?m)^VERSION\s*:=\s*(\S+)$`,
		"profiler/core.h":             `#define NCCLPROF_VERSION "([^"]+)"`,
		"python/ncclprof/_version.py": `__version__ = "([^"]+)"`,
	} {
		b, err := os.ReadFile(filepath.Join(root, file))
		if err != nil {
			t.Fatal(err)
		}
		m := regexp.MustCompile(pattern).FindSubmatch(b)
		if m == nil {
			t.Errorf("%s: no version found (%s)", file, pattern)
		} else if string(m[1]) != Version {
			t.Errorf("%s says %s, internal/version says %s", file, m[1], Version)
		}
	}
}
