package main

import (
	"regexp"
	"strconv"
	"strings"
	"unicode"
)

// Prose returns the paragraphs of English prose in a reStructuredText
// source, with the markup removed: headings (titles and their adornments),
// transitions, comments, link targets, literal blocks (after "::"), doctest
// blocks, tables, line blocks, field lists and the directives that hold no
// prose (code-block, index, toctree, module, audit-event, …) are dropped;
// the bodies of admonitions (note, warning, seealso, …), version notes and
// object descriptions (function, class, method, …) are kept without their
// signatures and options; list items and definitions become paragraphs of
// their own (definition terms are dropped). Inline markup is reduced to
// its text: :role:`x` → x (:role:`title <target>` → title, ~a.b → b,
// !x → x), “literal” → literal, *emphasis*, **strong**, `link <url>`_ →
// link, footnote references and substitutions are removed, escapes
// resolved. A paragraph is kept only when it reads as prose: at least
// minProseWords words, mostly letters.
func Prose(src string) []string {
	lines := strings.Split(strings.ReplaceAll(src, "\r\n", "\n"), "\n")
	for i, l := range lines {
		lines[i] = strings.TrimRight(expandTabs(l), " \t\r")
	}
	var out []string
	parseBlocks(lines, &out)
	return out
}

// minProseWords is the shortest paragraph Prose keeps.
const minProseWords = 6

func expandTabs(s string) string {
	if !strings.Contains(s, "\t") {
		return s
	}
	var b strings.Builder
	col := 0
	for _, r := range s {
		if r == '\t' {
			n := 8 - col%8
			b.WriteString(strings.Repeat(" ", n))
			col += n
			continue
		}
		b.WriteRune(r)
		col++
	}
	return b.String()
}

func indentOf(s string) int { return len(s) - len(strings.TrimLeft(s, " ")) }

func blank(s string) bool { return strings.TrimSpace(s) == "" }

// blockEnd returns the index after the lines following i that are blank or
// indented more than ind (an indented body), not counting trailing blanks.
func blockEnd(lines []string, i, ind int) int {
	end := i
	for j := i; j < len(lines); j++ {
		if blank(lines[j]) {
			continue
		}
		if indentOf(lines[j]) <= ind {
			break
		}
		end = j + 1
	}
	return end
}

// dedent removes the smallest indentation of the non-blank lines.
func dedent(lines []string) []string {
	min := -1
	for _, l := range lines {
		if blank(l) {
			continue
		}
		if n := indentOf(l); min < 0 || n < min {
			min = n
		}
	}
	out := make([]string, len(lines))
	for i, l := range lines {
		if len(l) >= min && min > 0 {
			out[i] = l[min:]
		} else {
			out[i] = strings.TrimLeft(l, " ")
		}
	}
	return out
}

const adornChars = "=-~^*#\"'`+:._<>!$%&,/;?@[\\]{|}"

// isAdornment says whether a trimmed line is a section adornment or a
// transition: one punctuation character repeated at least three times.
func isAdornment(t string) bool {
	if len(t) < 3 || !strings.ContainsRune(adornChars, rune(t[0])) {
		return false
	}
	return strings.Count(t, t[:1]) == len(t)
}

var (
	directiveRE   = regexp.MustCompile(`^\.\.\s+([A-Za-z][\w:.-]*)::(.*)$`)
	simpleTableRE = regexp.MustCompile(`^=+( +=+)+$`)
	gridTableRE   = regexp.MustCompile(`^\+[-=+]+\+$`)
	bulletRE      = regexp.MustCompile(`^([-*+•]|#\.|\d+\.|\(\d+\)|\d+\)|[a-z]\.|[a-z]\))( +|$)`)
	fieldRE       = regexp.MustCompile(`^:[A-Za-z][^:` + "`" + `]*:( |$)`)
)

// Directive kinds: how much of a directive's block is prose.
const (
	dirDrop      = iota // nothing (code, index, toctree, module, …)
	dirContent          // the text after "::" and the body (admonitions)
	dirVersion          // the body and the first-line text after the version
	dirAfterArgs        // the body after the first blank line (signatures, titles, options come first)
)

var directiveKinds = map[string]int{
	"note": dirContent, "warning": dirContent, "important": dirContent, "tip": dirContent,
	"hint": dirContent, "caution": dirContent, "attention": dirContent, "danger": dirContent,
	"error": dirContent, "seealso": dirContent, "impl-detail": dirContent, "epigraph": dirContent,
	"admonition": dirAfterArgs, "topic": dirAfterArgs, "sidebar": dirAfterArgs, "container": dirAfterArgs,
	"versionadded": dirVersion, "versionchanged": dirVersion, "deprecated": dirVersion, "deprecated-removed": dirVersion,
	"function": dirAfterArgs, "method": dirAfterArgs, "class": dirAfterArgs, "attribute": dirAfterArgs,
	"data": dirAfterArgs, "exception": dirAfterArgs, "decorator": dirAfterArgs, "decoratormethod": dirAfterArgs,
	"classmethod": dirAfterArgs, "staticmethod": dirAfterArgs, "abstractmethod": dirAfterArgs,
	"coroutinefunction": dirAfterArgs, "coroutinemethod": dirAfterArgs, "awaitablefunction": dirAfterArgs,
	"awaitablemethod": dirAfterArgs, "describe": dirAfterArgs, "object": dirAfterArgs, "option": dirAfterArgs,
	"cmdoption": dirAfterArgs, "envvar": dirAfterArgs, "opcode": dirAfterArgs, "pdbcommand": dirAfterArgs,
	"member": dirAfterArgs, "macro": dirAfterArgs, "type": dirAfterArgs, "var": dirAfterArgs,
	"struct": dirAfterArgs, "union": dirAfterArgs, "enum": dirAfterArgs, "enumerator": dirAfterArgs,
	"only": dirAfterArgs, "glossary": dirAfterArgs,
}

// parseBlocks appends the prose paragraphs of lines (one indentation
// level, possibly indented as a whole) to out.
func parseBlocks(lines []string, out *[]string) {
	i := 0
	for i < len(lines) {
		if blank(lines[i]) {
			i++
			continue
		}
		i = parseBlock(lines, i, out)
	}
}

// parseBlock appends the prose of the block starting at the non-blank
// line i to out and returns the index after the block.
func parseBlock(lines []string, i int, out *[]string) int {
	ind := indentOf(lines[i])
	t := strings.TrimSpace(lines[i])
	next := ""
	if i+1 < len(lines) {
		next = strings.TrimSpace(lines[i+1])
	}
	switch {
	case t == ".." || strings.HasPrefix(t, ".. "):
		end := blockEnd(lines, i+1, ind)
		explicitMarkup(t, lines[i+1:end], out)
		return end
	case strings.HasPrefix(t, "__ "):
		return blockEnd(lines, i+1, ind)
	case endsAtBlank(t):
		for i < len(lines) && !blank(lines[i]) {
			i++
		}
		return i
	case simpleTableRE.MatchString(t):
		return simpleTableEnd(lines, i)
	case isAdornment(t):
		// an overline + title + underline, or a transition
		if next != "" && i+2 < len(lines) && isAdornment(strings.TrimSpace(lines[i+2])) {
			return i + 3
		}
		return i + 1
	case next != "" && isAdornment(next) && indentOf(lines[i+1]) == ind && len(next) >= min(len(t), 3):
		return i + 2 // a title and its underline
	case fieldRE.MatchString(t):
		return blockEnd(lines, i+1, ind)
	case bulletRE.MatchString(t):
		return listItem(lines, i, ind, t, out)
	}
	return paragraph(lines, i, ind, out)
}

// endsAtBlank reports whether the block starting with trimmed line t is
// a grid table, a line block or a doctest block, which end at a blank
// line.
func endsAtBlank(t string) bool {
	return gridTableRE.MatchString(t) || strings.HasPrefix(t, "| ") || t == "|" || strings.HasPrefix(t, ">>>")
}

// listItem parses the bulleted or enumerated item starting at line i
// (trimmed t, indented ind) as a block of its own and returns the index
// after it.
func listItem(lines []string, i, ind int, t string, out *[]string) int {
	m := bulletRE.FindString(t)
	body := []string{strings.Repeat(" ", ind+len(m)) + t[len(m):]}
	end := blockEnd(lines, i+1, ind)
	body = append(body, lines[i+1:end]...)
	parseBlocks(dedent(body), out)
	return end
}

// paragraph handles the lines from i on at indentation ind up to a blank
// or differently indented line: a paragraph, one introducing a literal
// block (dropped), or a definition list item's term (dropped; its
// definition is parsed). It returns the index after what it consumed.
func paragraph(lines []string, i, ind int, out *[]string) int {
	j := i
	for j < len(lines) && !blank(lines[j]) && indentOf(lines[j]) == ind {
		j++
	}
	para := strings.Join(trimAll(lines[i:j]), " ")
	switch {
	case strings.HasSuffix(para, "::"):
		// the paragraph introduces a literal block
		para = strings.TrimSuffix(para, "::")
		if strings.HasSuffix(para, " ") || para == "" {
			para = strings.TrimRight(para, " ")
		} else {
			para += ":"
		}
		emit(para, out)
		return blockEnd(lines, j, ind)
	case j < len(lines) && !blank(lines[j]) && indentOf(lines[j]) > ind:
		// a definition list item: the term is dropped, the definition is
		// prose
		end := blockEnd(lines, j, ind)
		parseBlocks(dedent(lines[j:end]), out)
		return end
	}
	emit(para, out)
	return j
}

func trimAll(lines []string) []string {
	out := make([]string, len(lines))
	for i, l := range lines {
		out[i] = strings.TrimSpace(l)
	}
	return out
}

// simpleTableEnd returns the index after a simple table starting with the
// border at i: the table ends at a later border followed by a blank line.
func simpleTableEnd(lines []string, i int) int {
	for j := i + 1; j < len(lines); j++ {
		if simpleTableRE.MatchString(strings.TrimSpace(lines[j])) && (j+1 == len(lines) || blank(lines[j+1])) {
			return j + 1
		}
	}
	return len(lines)
}

// explicitMarkup handles a block starting with "..": a directive, keeping
// the prose of those directiveKinds lists, or a comment, target,
// substitution or footnote, all dropped.
func explicitMarkup(first string, body []string, out *[]string) {
	m := directiveRE.FindStringSubmatch(first)
	if m == nil {
		return
	}
	name := m[1]
	if k := strings.LastIndexByte(name, ':'); k >= 0 {
		name = name[k+1:] // c:function, py:method
	}
	rest := strings.TrimSpace(m[2])
	body = dedent(body)
	// options (":noindex:", ":synopsis: …") directly after the directive line
	skipOptions := func(b []string) []string {
		for len(b) > 0 && !blank(b[0]) && fieldRE.MatchString(strings.TrimSpace(b[0])) {
			b = b[blockEnd(b, 1, indentOf(b[0])):]
		}
		return b
	}
	switch directiveKinds[name] {
	case dirContent:
		b := skipOptions(body)
		if rest != "" {
			b = append([]string{rest}, b...)
		}
		parseBlocks(b, out)
	case dirVersion:
		// the version (two for deprecated-removed), then optional text
		n := 1
		if name == "deprecated-removed" {
			n = 2
		}
		if f := strings.Fields(rest); len(f) > n {
			body = append([]string{strings.Join(f[n:], " ")}, body...)
		}
		parseBlocks(skipOptions(body), out)
	case dirAfterArgs:
		k := 0
		for k < len(body) && !blank(body[k]) {
			k++
		}
		parseBlocks(body[k:], out)
	}
}

// emit appends the paragraph's text when it reads as prose.
func emit(para string, out *[]string) {
	s := Inline(para)
	if isProse(s) {
		*out = append(*out, s)
	}
}

func isProse(s string) bool {
	words := strings.Fields(s)
	if len(words) < minProseWords {
		return false
	}
	var letters, other int
	for _, r := range s {
		switch {
		case unicode.IsLetter(r) || r == ' ':
			letters++
		case unicode.IsSpace(r):
		default:
			other++
		}
	}
	return letters >= 4*other
}

var (
	roleRE      = regexp.MustCompile(":((?:[A-Za-z][\\w.+-]*:)+)`([^`]+)`")
	escapeRE    = regexp.MustCompile(`\\[\s\S]`)
	literalRE   = regexp.MustCompile("``(.+?)``")
	titleRE     = regexp.MustCompile(`^(.*?)\s*<[^<>]*>$`)
	linkRE      = regexp.MustCompile("`([^`]+?)`__?")
	defaultRE   = regexp.MustCompile("`([^`]+)`")
	footnoteRE  = regexp.MustCompile(`\s*\[(?:#[\w-]*|\*|\d+|[A-Za-z][\w.-]*)\]_`)
	substRE     = regexp.MustCompile(`\|[^|\s][^|]*\|_{0,2}`)
	strongRE    = regexp.MustCompile(`\*\*([^*\s](?:[^*]*[^*\s])?)\*\*`)
	emphasisRE  = regexp.MustCompile(`\*([^*\s](?:[^*]*[^*\s])?)\*`)
	namedRefRE  = regexp.MustCompile(`\b([A-Za-z][A-Za-z0-9-]*)__?(\W|$)`)
	placeholder = regexp.MustCompile("\x00(\\d+)\x00")
	spaceRE     = regexp.MustCompile(`\s+`)
)

// Inline reduces the inline markup of one paragraph to its text (see
// Prose) and collapses whitespace.
func Inline(s string) string {
	// Literals, escaped characters, role and link texts are set aside
	// (as NUL-delimited placeholders) so that the later rules do not touch
	// the characters inside them.
	s = strings.ReplaceAll(s, "\x00", "")
	var kept []string
	keep := func(t string) string {
		kept = append(kept, t)
		return "\x00" + strconv.Itoa(len(kept)-1) + "\x00"
	}
	s = literalRE.ReplaceAllStringFunc(s, func(m string) string {
		return keep(literalRE.FindStringSubmatch(m)[1])
	})
	s = escapeRE.ReplaceAllStringFunc(s, func(m string) string {
		if m[1] == ' ' {
			return "" // "\ " separates markup from text and disappears
		}
		return keep(m[1:])
	})
	s = roleRE.ReplaceAllStringFunc(s, func(m string) string {
		g := roleRE.FindStringSubmatch(m)
		return keep(roleText(strings.TrimSuffix(g[1], ":"), g[2]))
	})
	s = footnoteRE.ReplaceAllString(s, "")
	s = linkRE.ReplaceAllStringFunc(s, func(m string) string {
		t := linkRE.FindStringSubmatch(m)[1]
		if tm := titleRE.FindStringSubmatch(t); tm != nil && tm[1] != "" {
			t = tm[1]
		}
		return keep(t)
	})
	s = defaultRE.ReplaceAllStringFunc(s, func(m string) string {
		return keep(defaultRE.FindStringSubmatch(m)[1])
	})
	s = substRE.ReplaceAllString(s, "")
	s = strongRE.ReplaceAllString(s, "$1")
	s = emphasisRE.ReplaceAllString(s, "$1")
	s = namedRefRE.ReplaceAllString(s, "$1$2")
	// kept texts may hold placeholders of escapes; each refers to an
	// earlier one, so expanding in order terminates
	for strings.Contains(s, "\x00") {
		s = placeholder.ReplaceAllStringFunc(s, func(m string) string {
			n, _ := strconv.Atoi(m[1 : len(m)-1])
			return kept[n]
		})
	}
	s = strings.ReplaceAll(s, " ,", ",")
	s = strings.ReplaceAll(s, " .", ".")
	return strings.TrimSpace(spaceRE.ReplaceAllString(s, " "))
}

// roleText is what Sphinx shows for a role's content.
func roleText(role, t string) string {
	if m := titleRE.FindStringSubmatch(t); m != nil && m[1] != "" {
		return m[1]
	}
	switch role {
	case "pep":
		return "PEP " + t
	case "rfc":
		return "RFC " + t
	}
	t = strings.TrimPrefix(t, "!")
	if strings.HasPrefix(t, "~") {
		t = t[1:]
		if k := strings.LastIndexByte(t, '.'); k >= 0 && k+1 < len(t) {
			t = t[k+1:]
		}
	}
	return t
}
