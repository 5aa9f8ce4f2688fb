//go:build !linux

package tracefile

import "os"

// replace moves the finished output tmp to path (see replace_linux.go).
func replace(tmp, path string) error { return os.Rename(tmp, path) }
