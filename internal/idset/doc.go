// Package idset remembers ids by fingerprint, in a table apart from Go's
// heap where the platform allows: the duplicate-id checks of embed's
// part folders and of corpus's JSONL reader.
package idset
