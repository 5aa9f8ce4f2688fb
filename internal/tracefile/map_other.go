//go:build !linux

package tracefile

// MapFile reads path as ReadFile does: mapping is only done on Linux (see map_linux.go).
func MapFile(path string) ([]byte, error) { return ReadFile(path) }
