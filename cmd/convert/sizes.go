package main

import (
	"errors"
	"flag"
	"strings"

	"github.com/linearize/linearize/cmd/internal/cli"
	"github.com/linearize/linearize/convert"
)

// sizeFlags are the flags of the conversions' sizes (convert.AllSizes:
// Performer's --features, Linformer's --k, ...), which bench and inspect
// --cost share: each flag's default is its conversion's.
type sizeFlags struct {
	values map[string]*int
}

// sizeBound is the bound of size z's flag.
func sizeBound(z convert.Size) int {
	if z.Max > 0 {
		return z.Max
	}
	return maxSizeFlag
}

// register defines the size flags on fs, each help after prefix.
func (s *sizeFlags) register(fs *flag.FlagSet, prefix string) {
	s.values = map[string]*int{}
	for _, z := range convert.AllSizes() {
		s.values[z.Flag] = fs.Int(z.Flag, z.Default, prefix+z.Usage+atMost(sizeBound(z)))
	}
}

// check refuses a size that is not positive (0 where it stands for a
// default: ZeroMeans) or past its bound.
func (s *sizeFlags) check() error {
	var positive []string
	bad := false
	for _, z := range convert.AllSizes() {
		if z.ZeroMeans == "" {
			positive = append(positive, "--"+z.Flag)
			bad = bad || *s.values[z.Flag] <= 0
		}
	}
	if bad {
		return cli.UsageError("%s must be positive", andList(positive))
	}
	var counts []count
	for _, z := range convert.AllSizes() {
		v := *s.values[z.Flag]
		if z.ZeroMeans != "" && (v < 0 || v > sizeBound(z)) {
			return cli.UsageError("--%s %d: want 1..%d (0: %s)", z.Flag, v, sizeBound(z), z.ZeroMeans)
		}
		counts = append(counts, count{z.Flag, v, sizeBound(z)})
	}
	return checkCounts(counts...)
}

// all returns the value of every size flag.
func (s *sizeFlags) all() convert.Sizes {
	out := convert.Sizes{}
	for name, v := range s.values {
		out[name] = *v
	}
	return out
}

// given returns the sizes of the flags given on fs: the others are the
// conversions' defaults.
func (s *sizeFlags) given(fs *flag.FlagSet) convert.Sizes {
	out := convert.Sizes{}
	fs.Visit(func(fl *flag.Flag) {
		if v, ok := s.values[fl.Name]; ok {
			out[fl.Name] = *v
		}
	})
	return out
}

// sizeOptionError is optionError for a conversion sized by the size
// flags: an option error on a size names its flag; flagOf maps the other
// fields.
func sizeOptionError(err error, flagOf map[string]string) error {
	var oe *convert.OptionError
	if errors.As(err, &oe) {
		if c, ok := convert.LookupConversion(oe.Op); ok {
			if z, ok := c.SizeOf(oe.Field); ok {
				return optionError(err, map[string]string{oe.Field: z.Flag})
			}
		}
	}
	return optionError(err, flagOf)
}

// andList joins items as "a, b and c".
func andList(items []string) string {
	if len(items) < 2 {
		return strings.Join(items, "")
	}
	return strings.Join(items[:len(items)-1], ", ") + " and " + items[len(items)-1]
}
