package clitest

import (
	"flag"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/linearize/linearize/cmd/internal/cli"
)

// flagLine matches a flag's first line in the usage text: "  --NAME" or
// "  -o", then the value name, if any, then (on -h, when it fits) the
// start of its description after two spaces or more.
var flagLine = regexp.MustCompile(`^  (--?)([a-z0-9][a-z0-9-]*)(?: (\S+))?(?: {2,}(\S.*))?$`)

// Help runs every registered command's --help (also -h and "BINARY help
// NAME") and checks that it exits 0 with the usage on stdout; that
// the synopsis has the common form (positional arguments and required
// flags, then "[flags]") and names only flags the command defines; that
// the flag list has every flag, spelled as the synopses spell flags,
// each with a one-word value name (a backquoted word in a flag's help
// becomes its value name: a phrase there would garble the line) and its
// default; and that a flag name has the same default in every command,
// but for the flags in defaultsDiffer (flag name → why its defaults
// differ; a listed flag whose defaults agree, or that no command
// defines, fails too).
func Help(t *testing.T, defaultsDiffer map[string]string) {
	t.Helper()
	sets := map[string]*flag.FlagSet{}
	cli.HelpShown = func(fs *flag.FlagSet) { sets[fs.Name()] = fs }
	t.Cleanup(func() { cli.HelpShown = nil })
	_, mainOut, _ := Run("--help")
	for _, name := range cli.Names() {
		out := commandHelp(t, name)
		if !strings.Contains(mainOut, "\n  "+name+" ") {
			t.Errorf("%s --help does not list %s", cli.Name, name)
		}
		fs := sets[name]
		if fs == nil {
			t.Errorf("%s --help: no flag set seen (cli.ParseFlags not used?)", name)
			continue
		}
		if strings.Contains(out, "`") {
			t.Errorf("%s --help has a backquote left:\n%s", name, out)
		}
		lines := strings.Split(out, "\n")
		synopsis := lines[0]
		checkSynopsis(t, name, synopsis, fs)
		checkFlagList(t, name, synopsis, fs, flagList(t, name, lines))
		full := strings.Join(strings.Fields(fullHelp(name)), " ")
		fs.VisitAll(func(f *flag.Flag) {
			_, usage := flag.UnquoteUsage(f)
			if !strings.Contains(full, strings.Join(strings.Fields(usage), " ")) {
				t.Errorf("%s help %s does not give %s's whole description", cli.Name, name, cli.FlagSpelling(f.Name))
			}
		})
		if !strings.Contains(strings.Join(strings.Fields(out), " "), cli.ExitCodesHelp) {
			t.Errorf("%s --help does not give the exit codes", name)
		}
	}
	checkDefaults(t, sets, defaultsDiffer)
}

// commandHelp runs the command's --help, -h and "BINARY help NAME",
// checks that each exits 0 with its text on stdout and nothing on stderr,
// that -h and --help print the same text, and that "help NAME" (the full
// reference) holds every flag's whole description; it returns -h's text.
func commandHelp(t *testing.T, name string) string {
	t.Helper()
	var texts []string
	for _, args := range [][]string{{name, "--help"}, {name, "-h"}, {"help", name}} {
		code, out, errOut := Run(args...)
		if code != cli.ExitOK || errOut != "" {
			t.Errorf("%s %s: exit %d, stderr %q; want 0 and nothing", cli.Name, strings.Join(args, " "), code, errOut)
		}
		texts = append(texts, out)
	}
	if texts[1] != texts[0] {
		t.Errorf("%s -h prints another text than %s %s --help", name, cli.Name, name)
	}
	return texts[0]
}

// fullHelp is "BINARY help NAME"'s text.
func fullHelp(name string) string {
	_, out, _ := Run("help", name)
	return out
}

// synopsisFlag finds the flags a synopsis names.
var synopsisFlag = regexp.MustCompile(`(?:^|[\s\[])(--?)([a-z][a-z0-9-]*)`)

// checkSynopsis checks that the synopsis has the common form and names
// only flags of fs, spelled as the flag list spells them.
func checkSynopsis(t *testing.T, name, synopsis string, fs *flag.FlagSet) {
	t.Helper()
	prefix := "usage: " + cli.Name + " " + name + " "
	if !strings.HasPrefix(synopsis, prefix) || !strings.HasSuffix(synopsis, "[flags]") {
		t.Errorf("%s: synopsis %q, want %q…[flags]", name, synopsis, prefix)
	}
	for _, m := range synopsisFlag.FindAllStringSubmatch(strings.TrimPrefix(synopsis, prefix), -1) {
		f := fs.Lookup(m[2])
		switch {
		case f == nil:
			t.Errorf("%s: synopsis names %s%s, which is no flag of the command", name, m[1], m[2])
		case m[1]+m[2] != cli.FlagSpelling(m[2]):
			t.Errorf("%s: synopsis spells %s%s, the flag list %s", name, m[1], m[2], cli.FlagSpelling(m[2]))
		}
	}
}

// flagList reads the flag list of a usage text (each flag's line, then
// its help, indented), checking each line's form and the order, and
// returns each flag's help line.
func flagList(t *testing.T, name string, lines []string) map[string]string {
	t.Helper()
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
		if m[1]+m[2] != cli.FlagSpelling(m[2]) {
			t.Errorf("%s: flag line %q, want it spelled %s", name, l, cli.FlagSpelling(m[2]))
		}
		if m[3] == "value" {
			t.Errorf("%s: --%s has no value name (give its help a `NAME`)", name, m[2])
		}
		help := m[4]
		for _, next := range lines[i+1:] {
			if !strings.HasPrefix(next, "        ") {
				break
			}
			help += " " + strings.TrimSpace(next)
		}
		listed[m[2]] = help
		order = append(order, m[2])
	}
	if !slices.IsSorted(order) {
		t.Errorf("%s: flags not in order: %v", name, order)
	}
	return listed
}

// checkFlagList checks that the flag list (listed) has every flag of fs
// and no other, each with a help line that shows its default, and that a
// required flag is in the synopsis.
func checkFlagList(t *testing.T, name, synopsis string, fs *flag.FlagSet, listed map[string]string) {
	t.Helper()
	fs.VisitAll(func(f *flag.Flag) {
		help, ok := listed[f.Name]
		if !ok {
			t.Errorf("%s --help does not list %s", name, cli.FlagSpelling(f.Name))
			return
		}
		delete(listed, f.Name)
		if strings.TrimSpace(help) == "" {
			t.Errorf("%s: %s has no help line", name, cli.FlagSpelling(f.Name))
		}
		switch f.DefValue {
		case "", "0", "false":
		default:
			if !strings.Contains(help, "(default ") || !strings.Contains(help, f.DefValue+`)`) && !strings.Contains(help, f.DefValue+`")`) {
				t.Errorf("%s: %s's help does not show its default %s: %q", name, cli.FlagSpelling(f.Name), f.DefValue, help)
			}
		}
		if strings.Contains(f.Usage, "required") && !strings.Contains(synopsis, " "+cli.FlagSpelling(f.Name)+" ") {
			t.Errorf("%s: %s is required but not in the synopsis %q", name, cli.FlagSpelling(f.Name), synopsis)
		}
	})
	for f := range listed {
		t.Errorf("%s --help lists %s, which is no flag of the command", name, f)
	}
}

// checkDefaults checks that a flag name has one default in every command
// (sets), but for the flags in defaultsDiffer, and that each of those
// is defined somewhere with defaults that differ.
func checkDefaults(t *testing.T, sets map[string]*flag.FlagSet, defaultsDiffer map[string]string) {
	t.Helper()
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
			t.Errorf("%s has different defaults (make them agree, or say why in defaultsDiffer): %s", cli.FlagSpelling(f), strings.Join(parts, "; "))
		case len(byDefault) == 1 && excepted:
			t.Errorf("defaultsDiffer lists %s, whose defaults agree now", cli.FlagSpelling(f))
		}
	}
	for f := range defaultsDiffer {
		if defaults[f] == nil {
			t.Errorf("defaultsDiffer lists %s, which no command defines", cli.FlagSpelling(f))
		}
	}
}

// HelpFits checks that the binary's usage and every command's -h read on
// a terminal: every line at most cli.Width columns, -h at most 50 lines,
// a one-line summary, and one example that starts with the command and
// uses only flags the command defines.
func HelpFits(t *testing.T) {
	t.Helper()
	sets := map[string]*flag.FlagSet{}
	cli.HelpShown = func(fs *flag.FlagSet) { sets[fs.Name()] = fs }
	t.Cleanup(func() { cli.HelpShown = nil })
	_, mainOut, _ := Run("--help")
	checkWidth(t, cli.Name+" --help", mainOut)
	for _, name := range cli.Names() {
		_, out, _ := Run(name, "-h")
		checkWidth(t, name+" -h", out)
		if n := strings.Count(out, "\n"); n > 50 {
			t.Errorf("%s -h: %d lines, want at most 50", name, n)
		}
		if _, after, ok := strings.Cut(mainOut, "\n  "+name+" "); !ok || strings.HasPrefix(after[strings.Index(after, "\n")+1:], strings.Repeat(" ", 8)) {
			t.Errorf("%s --help: %s's summary is not one line beside its name", cli.Name, name)
		}
		_, ex, ok := strings.Cut(out, "\nexample:\n  ")
		ex, _, _ = strings.Cut(ex, "\n")
		if !ok || !strings.HasPrefix(ex, cli.Name+" "+name+" ") {
			t.Errorf("%s -h: no example line starting %q", name, cli.Name+" "+name)
			continue
		}
		fs := sets[name]
		for _, m := range synopsisFlag.FindAllStringSubmatch(ex, -1) {
			if fs != nil && fs.Lookup(m[2]) == nil {
				t.Errorf("%s -h: the example uses %s%s, which is no flag of the command", name, m[1], m[2])
			}
		}
	}
}

// checkWidth fails for every line of text wider than cli.Width runes.
func checkWidth(t *testing.T, what, text string) {
	t.Helper()
	for _, l := range strings.Split(text, "\n") {
		if n := utf8.RuneCountInString(l); n > cli.Width {
			t.Errorf("%s: a line of %d columns, want at most %d: %q", what, n, cli.Width, l)
		}
	}
}
