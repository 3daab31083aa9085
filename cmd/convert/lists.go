package main

import "github.com/linearize/linearize/internal/cliutil"

// ints parses the integer list flag name (cliutil.Ints: K and M suffixes,
// ranges when l allows them); a bad value is a usage error naming the
// flag.
func ints(name, value string, l cliutil.IntList) ([]int, error) {
	v, err := cliutil.Ints(name, value, l)
	if err != nil {
		return nil, &exitError{exitUsage, err}
	}
	return v, nil
}

// strList splits a comma-separated flag value into its trimmed, non-empty
// items.
func strList(s string) []string { return cliutil.Strings(s) }
