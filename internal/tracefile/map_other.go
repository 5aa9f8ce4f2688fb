//go:build !linux

package tracefile

// MapFile reads path as ReadFile does: mapping is only done on Linux (see map_linux.go).
func MapFile(path string) ([]byte, error) { return ReadFile(path) }

// ReadPass reads path as ReadFile does (mapping is Linux's, map_linux.go); Release does nothing.
func ReadPass(path string) (*Pass, error) {
	b, err := ReadFile(path)
	return &Pass{Data: b}, err
}

// Release does nothing here.
func (p *Pass) Release(upTo int64) {}

// Done does nothing here.
func (p *Pass) Done() {}
