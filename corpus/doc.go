// Package corpus reads documents and calibration texts, the inputs of
// convert's embed and evaluate and of the calibrated conversions, in
// four forms:
//
//   - Dir: every *.txt and *.md file of a folder, sorted by name, one
//     document each (the id: the file name);
//   - JSONL: one {"id": ..., "text": ...} object per line (an id is a
//     string or a number, unique in the file);
//   - Lines: one text per line of a file (the id: the line number);
//   - Texts: texts given as they are (ids text-1, text-2, …).
//
// Open takes a path that is either a folder (Dir) or a file (Lines), as
// a --calibration flag does. A path of "-" is the standard input for
// JSONL and Lines.
//
// Every form reads the same way. Blank lines are skipped (they are no
// records), a line's "\r\n" ends it as "\n" does, and a UTF-8 byte
// order mark at the start of a file is dropped. A text that is not UTF-8
// (or, in JSON, holds an escaped lone surrogate, half of a UTF-16 pair,
// which encoding/json would turn into U+FFFD without a word) is read all
// the same and marked: Doc.Bad says why and where, and the caller
// decides (embed refuses or skips it).
//
// A Source reads one document at a time when it is walked (Source.Each),
// holding one document whatever the input's size, and can start after
// the documents a resumed run has done; Source.ReadAll holds them all,
// for the commands that need every document at once. The bounds
// (Options) are the same for every form: one document (a line or a
// file) is at most DefaultMaxDoc bytes, and ReadAll reads at most
// DefaultMaxTotal bytes in all; both are lowered to half the memory the
// process may use when that is less. A pipe or a device (/dev/zero) is
// refused once it passes a bound, without reading further.
//
// The errors of the package say what is wrong with the input: a file
// that cannot be read, a line that is not one JSON object, an id used
// twice, an input past a bound (convert's commands exit 2 for them). They
// begin with "corpus: " and name the file, and the line and the bound at
// fault where there is one. An error of the function Source.Each calls
// is returned as it is.
package corpus
