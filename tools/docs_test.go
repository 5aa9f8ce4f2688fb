package tools_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// The documentation a clone carries: the README and every docs/*.md, plus the other READMEs.
func docFiles(t *testing.T) []string {
	t.Helper()
	files := []string{"../README.md"}
	for _, pat := range []string{"../docs/*.md", "../examples/*/README.md", "../python/README.md", "../testdata/*/README.md"} {
		m, err := filepath.Glob(pat)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, m...)
	}
	return files
}

var (
	mdLink  = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	heading = regexp.MustCompile(`(?m)^#{1,6} +(.+?) *$`)
	fence   = regexp.MustCompile("(?ms)^```.*?^```")
)

// anchors are the fragment names GitHub gives a Markdown file's headings: lower case, spaces to
// hyphens, punctuation other than - and _ dropped; a repeated heading gets -1, -2, ...
func anchors(text string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	for _, m := range heading.FindAllStringSubmatch(fence.ReplaceAllString(text, ""), -1) {
		var b strings.Builder
		for _, r := range strings.ToLower(m[1]) {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r > 127 && r != '—' && r != '–' && r != '·' && r != '→' && r != '…':
				b.WriteRune(r)
			}
		}
		a := b.String()
		if n := seen[a]; n > 0 {
			out[a+"-"+itoa(n)] = true
		} else {
			out[a] = true
		}
		seen[a]++
	}
	return out
}

func itoa(n int) string { return strconv.Itoa(n) }

// Every relative link in the README and docs/ leads to a file of the repository, and to a
// heading of it when it names one; none leads outside the repository.
func TestDocLinksResolve(t *testing.T) {
	root, _ := filepath.Abs("..")
	for _, f := range docFiles(t) {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		text := fence.ReplaceAllString(string(data), "")
		for _, m := range mdLink.FindAllStringSubmatch(text, -1) {
			target := m[1]
			if regexp.MustCompile(`^[a-z]+:`).MatchString(target) {
				continue // https:, mailto:
			}
			path, frag, _ := strings.Cut(target, "#")
			dest := f
			if path != "" {
				dest = filepath.Join(filepath.Dir(f), path)
			}
			abs, _ := filepath.Abs(dest)
			if !strings.HasPrefix(abs, root+string(filepath.Separator)) {
				t.Errorf("%s: link %s leads outside the repository", f, target)
				continue
			}
			st, err := os.Stat(dest)
			if err != nil {
				t.Errorf("%s: link %s: no such file in the repository", f, target)
				continue
			}
			if frag == "" || st.IsDir() || !strings.HasSuffix(dest, ".md") {
				continue
			}
			d, _ := os.ReadFile(dest)
			if !anchors(string(d))[frag] {
				t.Errorf("%s: link %s: %s has no heading #%s", f, target, dest, frag)
			}
		}
	}
}

// No file the repository tracks points at the project notes beside it (../shared/...): a clone
// does not have them.
func TestNothingPointsOutside(t *testing.T) {
	out, err := exec.Command("git", "-C", "..", "grep", "-n", "-I", "-e", `\.\./shared/`, "-e", `/work/shared`, "--", ".", ":!tools/docs_test.go").CombinedOutput()
	if err == nil {
		t.Errorf("files point outside the repository:\n%s", out)
	} else if len(out) > 0 {
		t.Fatalf("git grep: %v\n%s", err, out)
	}
}

// The README is the ten-minute read: at most 300 lines, the reference is in docs/.
func TestReadmeShort(t *testing.T) {
	data, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(data), "\n"); n > 300 {
		t.Errorf("README.md has %d lines; keep it to 300 and move reference material to docs/", n)
	}
}
