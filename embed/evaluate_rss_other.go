//go:build !linux && !darwin

package embed

// peakRSS is unknown on this system.
func peakRSS() int64 { return 0 }
