//go:build !unix

package infer

import "time"

// processCPU is not measured on this OS.
func processCPU() time.Duration { return 0 }
