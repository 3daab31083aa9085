// Package nativeprof reads the per-op-type profile that runtime's native
// backend records for a session created with runtime.NativeOptions.Profile
// (`convert bench-backends --profile`). It is internal so that the
// profile is no part of runtime's public API.
package nativeprof
