//go:build unix

package fsutil

import (
	"errors"
	"syscall"
)

// processAlive reports whether a process with this PID exists. A process
// of another user (EPERM) counts as alive.
func processAlive(pid int) bool {
	if pid <= 0 {
		return true // never signal a process group
	}
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
