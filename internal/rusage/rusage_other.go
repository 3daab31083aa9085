//go:build !linux && !darwin

package rusage

// PeakRSS is unknown on this system.
func PeakRSS() int64 { return 0 }

// addressSpaceLimit is unknown on this system.
func addressSpaceLimit() int64 { return 0 }
