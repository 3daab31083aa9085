//go:build !unix

package runtime

import "time"

// processCPU is not measured on this OS.
func processCPU() time.Duration { return 0 }
