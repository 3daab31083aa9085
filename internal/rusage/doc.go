// Package rusage reads the process's resource usage: the peak resident
// set size that `convert --stats` and the long-document evaluation report.
package rusage
