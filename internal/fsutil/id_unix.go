//go:build unix

package fsutil

import (
	"os"
	"syscall"
)

// fileID returns the device and inode of a file, which tell it from
// every other file while it exists.
func fileID(st os.FileInfo) (dev, ino uint64, ok bool) {
	s, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, 0, false
	}
	return uint64(s.Dev), uint64(s.Ino), true
}

// ownedByMe reports whether this process's user owns the file: a journal
// of another user (a shared, sticky folder) is never acted on.
func ownedByMe(st os.FileInfo) bool {
	s, ok := st.Sys().(*syscall.Stat_t)
	return !ok || int(s.Uid) == os.Getuid()
}
