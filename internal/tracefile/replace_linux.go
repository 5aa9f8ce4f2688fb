package tracefile

import (
	"os"

	"golang.org/x/sys/unix"
)

// replace moves the finished output tmp to path. Where path already names a file (a merge run
// again), the two are swapped in one step (renameat2 RENAME_EXCHANGE: path names the old file or
// the new one at every moment, never none or half of one) and the old one, now at tmp, is
// removed. A plain rename onto an existing file makes ext4 (its default auto_da_alloc) write the
// new file's data back before the rename returns: 0.6 s of a 3.9 s merge writing 900 MB on this
// project's VM, a sixth of its wall time spent idle. Elsewhere (no such file, a file system
// without the exchange) it is a plain rename.
func replace(tmp, path string) error {
	if err := unix.Renameat2(unix.AT_FDCWD, tmp, unix.AT_FDCWD, path, unix.RENAME_EXCHANGE); err == nil {
		return os.Remove(tmp)
	}
	return os.Rename(tmp, path)
}
