package cli

import (
	"flag"
	"fmt"
	"io"
	"regexp"
	"runtime/debug"
	"strings"
	"unicode/utf8"
)

// Width is the column usage texts are wrapped at.
const Width = 80

// fullHelp is set while "BINARY help NAME" prints a command's usage: the
// full reference, every flag's whole description, instead of -h's first
// clause of each.
var fullHelp bool

// flagColumn is where -h's flag descriptions start; a flag whose name and
// value name are wider puts its description on the next line.
const flagColumn = 24

func mainUsage(w io.Writer) {
	fmt.Fprintf(w, "usage: %s COMMAND [flags] ...\n", Name)
	fmt.Fprintln(w, "\ncommands:")
	for _, n := range Names() {
		writeColumns(w, "  "+n, commands[n].Summary, 21)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, wrap(fmt.Sprintf("Run '%s COMMAND -h' for a command's flags and an example, '%s help COMMAND' for every flag's full description, '%s --version' for the version.", Name, Name, Name), Width, ""))
	fmt.Fprintln(w, wrap(ExitCodesHelp, Width, ""))
}

// commandUsage prints a command's usage: the synopsis (positional
// arguments and required flags, then "[flags]"), the summary and detail,
// the example, and every flag with its value name (the `backquoted` word
// of its help, else its type), description and default: the first clause
// of the description on -h, all of it when full.
func commandUsage(w io.Writer, c *Command, fs *flag.FlagSet, full bool) {
	fmt.Fprintf(w, "usage: %s %s %s\n\n", Name, c.Name, c.Usage)
	about := c.Summary
	if c.Detail != "" {
		about = strings.TrimSuffix(about, ".") + ": " + c.Detail
	}
	fmt.Fprintln(w, wrap(about, Width, ""))
	if c.Example != "" {
		fmt.Fprintf(w, "\nexample:\n  %s %s\n", Name, c.Example)
	}
	if fs != nil {
		fmt.Fprintln(w, "\nflags:")
		printFlags(w, fs, full)
	}
	fmt.Fprintln(w)
	if !full {
		fmt.Fprintf(w, "'%s help %s' describes every flag in full.\n", Name, c.Name)
	}
	fmt.Fprintln(w, wrap(ExitCodesHelp, Width, ""))
}

// printFlags lists the flags of fs, spelled as the usage texts spell them
// (FlagSpelling), in order: "  --NAME VALUE" and the description, which
// starts at flagColumn (or on the next line when the name is wider) and
// wraps there; when full, the whole description on the lines below,
// indented by 8.
func printFlags(w io.Writer, fs *flag.FlagSet, full bool) {
	fs.VisitAll(func(f *flag.Flag) {
		name, usage := flag.UnquoteUsage(f)
		if name == "value" && stringValued(f.Value) {
			name = "string" // a TypedVar without a `NAME`, shown as a flag.String is
		}
		line := "  " + FlagSpelling(f.Name)
		if name != "" {
			line += " " + name
		}
		if !full {
			usage = Brief(usage)
		}
		switch def := f.DefValue; {
		case def == "" || def == "0" || def == "false":
		case stringValued(f.Value):
			usage += fmt.Sprintf(" (default %q)", def)
		default:
			usage += fmt.Sprintf(" (default %s)", def)
		}
		if full {
			fmt.Fprintf(w, "%s\n%s\n", line, wrap(usage, Width, "        "))
			return
		}
		writeColumns(w, line, usage, flagColumn)
	})
}

// writeColumns writes left, then text from column col, wrapped at Width
// with continuation lines indented to col; text starts on the next line
// when left reaches col.
func writeColumns(w io.Writer, left, text string, col int) {
	pad := strings.Repeat(" ", col)
	if n := utf8.RuneCountInString(left); n < col-1 {
		fmt.Fprintln(w, left+strings.Repeat(" ", col-n)+wrap(text, Width, pad)[col:])
		return
	}
	fmt.Fprintln(w, left)
	fmt.Fprintln(w, wrap(text, Width, pad))
}

// wrap breaks text into lines of at most width runes, each starting with
// indent (a word longer than a line stays whole).
func wrap(text string, width int, indent string) string {
	var b strings.Builder
	n := 0
	for i, word := range strings.Fields(text) {
		wl := utf8.RuneCountInString(word)
		switch {
		case i == 0:
			b.WriteString(indent + word)
			n = utf8.RuneCountInString(indent) + wl
		case n+1+wl > width:
			b.WriteString("\n" + indent + word)
			n = utf8.RuneCountInString(indent) + wl
		default:
			b.WriteString(" " + word)
			n += 1 + wl
		}
	}
	if b.Len() == 0 {
		return indent
	}
	return b.String()
}

// Brief is a flag description's first clause, as -h prints it: the text
// before the first " (", "; ", ": ", " — " or ". " outside brackets, once
// at least 16 characters are kept; a "(required)" or "(at most N)" of the
// rest is kept.
func Brief(usage string) string {
	depth, cut := 0, len(usage)
	for i, r := range usage {
		switch r {
		case '(', '[':
			depth++
		case ')', ']':
			depth--
		}
		if depth != 0 || i < 16 {
			continue
		}
		rest := usage[i:]
		if strings.HasPrefix(rest, " (") || strings.HasPrefix(rest, "; ") || strings.HasPrefix(rest, ": ") || strings.HasPrefix(rest, " — ") || strings.HasPrefix(rest, ". ") {
			cut = i
			break
		}
	}
	b := strings.TrimSuffix(usage[:cut], ".")
	if cut == len(usage) {
		return b
	}
	if strings.Contains(usage[cut:], "(required)") && !strings.Contains(b, "required") {
		b += " (required)"
	}
	if m := atMostText.FindString(usage[cut:]); m != "" {
		b += " " + m
	}
	return b
}

// atMostText finds a flag's bound in its description ("(at most 4096)").
var atMostText = regexp.MustCompile(`\(at most [0-9][0-9_,]*\)`)

// VersionLine says which build this is: the binary's name, ToolVersion
// and the Go toolchain that built it.
func VersionLine() string {
	line := Name + " (linearize) " + ToolVersion()
	if bi, ok := debug.ReadBuildInfo(); ok && bi.GoVersion != "" {
		line += " " + bi.GoVersion
	}
	return line
}

// ToolVersion is the version the binary was built as: the module's
// version, else its VCS revision (with "+dirty" when the tree was
// modified), else "devel". Outputs that record what made them (embed's
// manifest) record it.
func ToolVersion() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "devel"
	}
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	rev, dirty := "", false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev == "" {
		return "devel"
	}
	if dirty {
		rev += "+dirty"
	}
	return rev
}
