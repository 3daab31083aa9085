package main

import (
	"flag"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// defaultsDiffer lists the flags whose default is not the same in every
// command that defines them, with the reason. TestHelp fails on any other
// flag whose defaults differ, and on an entry here whose flag no longer
// differs.
var defaultsDiffer = map[string]string{
	"features":    "one M (performer, bench, inspect --cost: 256) or a sweep of Ms (features-error, report-real)",
	"k":           "convert linformer converts with k = 128; bench and inspect --cost compare at k = 256 = --features, so that the Performer and Linformer cores cost the same; report-real sweeps a list",
	"omega":       "performer samples one kind; features-error and report-real sweep a list",
	"norms":       "performer samples one kind; features-error and report-real sweep a list",
	"threads":     "bench and bench-backends time with a fixed 2 threads so that timings compare; elsewhere 0 is the backend's default (features-error: one per CPU)",
	"repeat":      "bench runs each timing in its own process (3 runs); bench-backends alternates the backends in one (5)",
	"lengths":     "bench and inspect --cost span 512…16384; bench-backends runs the whole model on both backends (128,512); report-real measures lengths in document mode only (empty)",
	"minibatch":   "finetune fits on all rows (0); report-real's tables use 16 texts per step",
	"calibration": "performer fits nothing without it (empty); report-real reads the repository's calibration texts",
	"seq-len":     "the input flags' 0 means the model's length (texts) or 16, at most the model's position limit (random inputs); features-error's synthetic sequences have 256; hedgehog cuts calibration documents into windows of 512, long --learned into windows of 2048 (several windows, so that the far field has something to learn)",
	"steps":       "finetune fits 200 Adam steps per layer; hedgehog trains every head 300 steps, since its maps start far from the teacher",
	"lr":          "finetune's 0 picks each method's rate; hedgehog's maps train at 0.01",
	"num-layers":  "build-model takes its preset's depth (0); bench-backends times 2 layers",
	"sinks":       "local-pooled and linformer keep [CLS] and the last token exact (first,last); long frames every window with its own [CLS] and [SEP], so it needs none",
	"batch":       "embed runs texts or chunks in batches of embed.DefaultBatch (8), the library's default; the input flags' --batch is the number of random input rows (1)",
	"max-tokens":  "embed reads every wordpiece (0); evaluate cuts documents at 4096 so that every system reads the same text and the buckets end there",
}

// helpCommands returns the registered command names, sorted.
func helpCommands() []string {
	var names []string
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// flagLine matches a flag's first line in the usage text: "  --NAME" or
// "  -o", then the value name, if any.
var flagLine = regexp.MustCompile(`^  (--?)([a-z0-9][a-z0-9-]*)(?: (\S+))?$`)

// TestHelp runs every registered command's --help (also -h and "convert
// help NAME") and checks that it exits 0 with the usage on stdout; that
// the synopsis has the common form (positional arguments and required
// flags, then "[flags]") and names only flags the command defines; that
// the flag list has every flag, spelled as the synopses spell flags,
// each with a one-word value name (a backquoted word in a flag's help
// becomes its value name: a phrase there would garble the line) and its
// default; and that a flag name has the same default in every command,
// but for the flags in defaultsDiffer.
func TestHelp(t *testing.T) {
	sets := map[string]*flag.FlagSet{}
	helpShown = func(fs *flag.FlagSet) { sets[fs.Name()] = fs }
	t.Cleanup(func() { helpShown = nil })
	_, mainOut, _ := runCLI("--help")
	synopsisFlag := regexp.MustCompile(`(?:^|[\s\[])(--?)([a-z][a-z0-9-]*)`)
	for _, name := range helpCommands() {
		var first string
		for _, args := range [][]string{{name, "--help"}, {name, "-h"}, {"help", name}} {
			code, out, errOut := runCLI(args...)
			if code != exitOK || errOut != "" {
				t.Errorf("convert %s: exit %d, stderr %q; want 0 and nothing", strings.Join(args, " "), code, errOut)
			}
			if first == "" {
				first = out
			} else if out != first {
				t.Errorf("convert %s prints another text than convert %s --help", strings.Join(args, " "), name)
			}
		}
		out := first
		if !strings.Contains(mainOut, "\n  "+name+" ") {
			t.Errorf("convert --help does not list %s", name)
		}
		fs := sets[name]
		if fs == nil {
			t.Errorf("%s --help: no flag set seen (parseFlags not used?)", name)
			continue
		}
		if strings.Contains(out, "`") {
			t.Errorf("%s --help has a backquote left:\n%s", name, out)
		}
		lines := strings.Split(out, "\n")
		synopsis := lines[0]
		prefix := "usage: convert " + name + " "
		if !strings.HasPrefix(synopsis, prefix) || !strings.HasSuffix(synopsis, "[flags]") {
			t.Errorf("%s: synopsis %q, want %q…[flags]", name, synopsis, prefix)
		}
		for _, m := range synopsisFlag.FindAllStringSubmatch(strings.TrimPrefix(synopsis, prefix), -1) {
			f := fs.Lookup(m[2])
			switch {
			case f == nil:
				t.Errorf("%s: synopsis names %s%s, which is no flag of the command", name, m[1], m[2])
			case m[1]+m[2] != flagSpelling(m[2]):
				t.Errorf("%s: synopsis spells %s%s, the flag list %s", name, m[1], m[2], flagSpelling(m[2]))
			}
		}
		// The flag list: each flag's line, then its help, indented.
		listed := map[string]string{} // flag → the help block
		var order []string
		for i, l := range lines {
			m := flagLine.FindStringSubmatch(l)
			if m == nil {
				if strings.HasPrefix(l, "  -") {
					t.Errorf("%s: garbled flag line %q", name, l)
				}
				continue
			}
			if m[1]+m[2] != flagSpelling(m[2]) {
				t.Errorf("%s: flag line %q, want it spelled %s", name, l, flagSpelling(m[2]))
			}
			if m[3] == "value" {
				t.Errorf("%s: --%s has no value name (give its help a `NAME`)", name, m[2])
			}
			help := ""
			if i+1 < len(lines) {
				help = lines[i+1]
			}
			listed[m[2]] = help
			order = append(order, m[2])
		}
		if !slices.IsSorted(order) {
			t.Errorf("%s: flags not in order: %v", name, order)
		}
		fs.VisitAll(func(f *flag.Flag) {
			help, ok := listed[f.Name]
			if !ok {
				t.Errorf("%s --help does not list %s", name, flagSpelling(f.Name))
				return
			}
			delete(listed, f.Name)
			if !strings.HasPrefix(help, "    \t") || strings.TrimSpace(help) == "" {
				t.Errorf("%s: %s has no help line", name, flagSpelling(f.Name))
			}
			switch f.DefValue {
			case "", "0", "false":
			default:
				if !strings.Contains(help, "(default ") || !strings.Contains(help, f.DefValue+`)`) && !strings.Contains(help, f.DefValue+`")`) {
					t.Errorf("%s: %s's help does not show its default %s: %q", name, flagSpelling(f.Name), f.DefValue, help)
				}
			}
			if strings.Contains(f.Usage, "required") && !strings.Contains(synopsis, " "+flagSpelling(f.Name)+" ") {
				t.Errorf("%s: %s is required but not in the synopsis %q", name, flagSpelling(f.Name), synopsis)
			}
		})
		for f := range listed {
			t.Errorf("%s --help lists %s, which is no flag of the command", name, f)
		}
		if !strings.Contains(out, exitCodesHelp) {
			t.Errorf("%s --help does not give the exit codes", name)
		}
	}

	// One default per flag name.
	defaults := map[string]map[string][]string{} // flag → default → commands
	for name, fs := range sets {
		fs.VisitAll(func(f *flag.Flag) {
			if defaults[f.Name] == nil {
				defaults[f.Name] = map[string][]string{}
			}
			defaults[f.Name][f.DefValue] = append(defaults[f.Name][f.DefValue], name)
		})
	}
	for f, byDefault := range defaults {
		_, excepted := defaultsDiffer[f]
		switch {
		case len(byDefault) > 1 && !excepted:
			var parts []string
			for d, cmds := range byDefault {
				sort.Strings(cmds)
				parts = append(parts, strings.Join(cmds, ", ")+": "+strconv.Quote(d))
			}
			sort.Strings(parts)
			t.Errorf("%s has different defaults (make them agree, or say why in defaultsDiffer): %s", flagSpelling(f), strings.Join(parts, "; "))
		case len(byDefault) == 1 && excepted:
			t.Errorf("defaultsDiffer lists %s, whose defaults agree now", flagSpelling(f))
		}
	}
	for f := range defaultsDiffer {
		if defaults[f] == nil {
			t.Errorf("defaultsDiffer lists %s, which no command defines", flagSpelling(f))
		}
	}
}
