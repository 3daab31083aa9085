//go:build !unix

package fsutil

import "os"

// processAlive reports whether a process with this PID may exist. Where
// os.FindProcess cannot tell (it fails only on Windows, for a PID that
// does not exist), the process counts as alive and its files are kept.
func processAlive(pid int) bool {
	if pid <= 0 {
		return true
	}
	p, err := os.FindProcess(pid)
	if err != nil {
		return false
	}
	p.Release()
	return true
}
