// Package nativeprof reads the per-op-type profile that infer's native
// backend records for a session created with infer.NativeOptions.Profile
// (`linlab bench-backends --profile`). It is internal so that the
// profile is no part of infer's public API.
package nativeprof
