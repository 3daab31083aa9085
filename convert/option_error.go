package convert

import (
	"errors"
	"strings"
	"unicode"
)

// ErrInvalidOption is wrapped by the errors of ToPerformer, ToLinformer,
// ToLocalPooled, ToLARA, ToHedgehog, ToLong and ExtendPositions about an
// option that is wrong
// whatever the model: a value out of range or not one of its choices, or
// options that cannot be combined. Such an error is an *OptionError.
// Errors about a model the options do not fit (a layer past its blocks,
// a position table shorter than MaxPositions, nothing convertible) do
// not wrap it.
var ErrInvalidOption = errors.New("convert: invalid option")

// OptionError is an option error (ErrInvalidOption). Field names the
// field of the options struct at fault ("Features", "FeatureMap", "K",
// "Segments", "Method", ...), so that a caller can name it its own way (a
// command-line flag); Msg says what is wrong, without the field's name.
type OptionError struct {
	Op    string // "performer", "linformer", "local-pooled", "lara", "extend positions"
	Field string
	Msg   string
}

func (e *OptionError) Error() string {
	return "convert: " + e.Op + ": " + fieldWords(e.Field) + " " + e.Msg
}

// Is makes errors.Is(err, ErrInvalidOption) true.
func (e *OptionError) Is(target error) bool { return target == ErrInvalidOption }

func optionError(op, field, msg string) error {
	return &OptionError{Op: op, Field: field, Msg: msg}
}

// fieldWords spells a field name in lower-case words: FeatureMap →
// "feature map", MaxLen → "max-len" (the few names the README spells with
// a hyphen keep it).
func fieldWords(field string) string {
	switch field {
	case "MaxLen":
		return "max-len"
	case "MaxPositions":
		return "max-positions"
	}
	var b strings.Builder
	for i, r := range field {
		if unicode.IsUpper(r) {
			if i > 0 {
				b.WriteByte(' ')
			}
			r = unicode.ToLower(r)
		}
		b.WriteRune(r)
	}
	return b.String()
}
