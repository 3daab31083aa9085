package main

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// snippet is hand-written reStructuredText in the style of the CPython
// docs, with one of each construct Prose must drop or keep.
const snippet = `.. _tut-intro:

*****************
An Informal Intro
*****************

.. module:: spam
   :synopsis: A module that does nothing at all, for testing.

.. sectionauthor:: Nobody

**Source code:** :source:` + "`Lib/spam.py`" + `

--------------

The :func:` + "`range`" + ` function returns an *immutable* sequence, and the
` + "``for``" + ` statement walks over it; see :ref:` + "`the tutorial <tut-for>`" + ` and
:pep:` + "`8`" + ` for the **style** rules.

Here is an example::

   >>> for i in range(3):
   ...     print(i)

Calling :meth:` + "`~collections.deque.append`" + ` or :keyword:` + "`!if`" + ` shows the short name of each target.

.. code-block:: python

   print("this is code and must not appear")

Section Two
===========

.. note::
   Notes are prose and are kept, even when they are
   indented under the directive.

.. function:: spam(eggs, ham=None)
              spam(eggs, *, bacon)

   Return a tin of spam with *eggs* inside; the second form\ s take a
   keyword argument ` + "`bacon <https://example.org/bacon>`_" + ` as well [#]_.

   .. versionchanged:: 3.11
      The *ham* parameter is accepted and silently ignored now.

+------------+------------+
| a grid     | table cell |
+============+============+
| never kept | in output  |
+------------+------------+

=====  =====================================
Col    Simple table row that is long enough
=====  =====================================
x      another row of the simple table here
=====  =====================================

* A bullet item that is long enough to count as a
  paragraph of its own.
* short item

:param eggs: a field list entry that is dropped from the prose output

term
   The definition of a term is prose, but its term is dropped.

.. |spam| replace:: canned meat
.. [#] A footnote that is dropped from the output entirely.
.. this comment is dropped too, however long its text is
`

func TestProse(t *testing.T) {
	got := Prose(snippet)
	want := []string{
		"The range function returns an immutable sequence, and the for statement walks over it; see the tutorial and PEP 8 for the style rules.",
		"Calling append or if shows the short name of each target.",
		"Notes are prose and are kept, even when they are indented under the directive.",
		"Return a tin of spam with eggs inside; the second forms take a keyword argument bacon as well.",
		"The ham parameter is accepted and silently ignored now.",
		"A bullet item that is long enough to count as a paragraph of its own.",
		"The definition of a term is prose, but its term is dropped.",
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Prose:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestInline(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{":class:`int` and :func:`len`", "int and len"},
		{":ref:`Title here <label>` text", "Title here text"},
		{":attr:`~a.b.c`", "c"},
		{":keyword:`!while` loop", "while loop"},
		{"``*args`` and *emphasis* and **strong**", "*args and emphasis and strong"},
		{"see `PEP <https://peps.python.org>`__ now", "see PEP now"},
		{"a Python_ reference", "a Python reference"},
		{"a |version| substitution", "a substitution"},
		{"escaped\\ s and \\*star\\*", "escapeds and *star*"},
		{":rfc:`2822` and :pep:`484`", "RFC 2822 and PEP 484"},
		{"``__init__`` stays", "__init__ stays"},
	} {
		if got := Inline(c.in); got != c.want {
			t.Errorf("Inline(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// TestRunSplitsByFolder runs the command's logic on a small tree: held-out
// and calibration documents come from different folders, short files are
// skipped, and the output is the same on a second run.
func TestRunSplitsByFolder(t *testing.T) {
	src := t.TempDir()
	para := strings.Repeat("This sentence is plain English prose about nothing in particular. ", 4)
	write := func(rel string, paras int) {
		p := filepath.Join(src, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		var b strings.Builder
		b.WriteString("Title\n=====\n\n")
		for i := 0; i < paras; i++ {
			b.WriteString(para + "\n\n")
		}
		if err := os.WriteFile(p, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("tutorial/a.rst.txt", 5)
	write("tutorial/b.rst.txt", 5)
	write("howto/c.rst.txt", 1) // too short
	write("library/d.rst.txt", 5)
	write("library/e.rst.txt", 5)
	write("library/f.rst.txt", 5)
	write("top.rst.txt", 5) // top level: neither set
	out := t.TempDir()
	if err := run(src, out, 2, 3, 100, 150, "tutorial,howto", "", 0); err != nil {
		t.Fatal(err)
	}
	read := func(name string) []string {
		b, err := os.ReadFile(filepath.Join(out, name))
		if err != nil {
			t.Fatal(err)
		}
		return strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	}
	held, cal := read("heldout.txt"), read("calibration.txt")
	if len(held) != 2 || len(cal) != 3 {
		t.Fatalf("got %d held-out and %d calibration documents, want 2 and 3", len(held), len(cal))
	}
	for _, d := range append(held, cal...) {
		if n := len(strings.Fields(d)); n != 150 {
			t.Errorf("document of %d words, want the first 150", n)
		}
		if strings.Contains(d, "Title") || strings.Contains(d, "===") {
			t.Errorf("heading left in %q", d[:40])
		}
	}
	if err := run(src, out, 3, 3, 100, 150, "tutorial,howto", "", 0); err == nil || !strings.Contains(err.Error(), "only 2 held-out") {
		t.Errorf("asking for 3 held-out documents of 2: err %v", err)
	}
}
