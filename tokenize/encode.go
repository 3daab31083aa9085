package tokenize

import "fmt"

// Encode returns the ids of [CLS] text [SEP], truncating the text's tokens
// so that the result has at most maxLen ids (maxLen ≤ 0: no limit; the
// smallest useful maxLen is 2). Only the text's first maxLen−2
// wordpieces are tokenized (IDsLimit): a long text costs no more than a
// short one.
func (t *Tokenizer) Encode(text string, maxLen int) []int64 {
	ids, _ := t.EncodeCut(text, maxLen)
	return ids
}

// EncodeCut is Encode that also reports whether the text had wordpieces
// beyond maxLen (the text was cut). It reads one wordpiece past what it
// keeps, no more.
func (t *Tokenizer) EncodeCut(text string, maxLen int) (ids []int64, cut bool) {
	var body []int64
	switch {
	case maxLen <= 0:
		body = t.IDs(text)
	default:
		keep := max(maxLen-2, 0)
		body = t.IDsLimit(text, keep+1)
		if len(body) > keep {
			body, cut = body[:keep], true
		}
	}
	ids = make([]int64, 0, len(body)+2)
	ids = append(ids, t.cls)
	ids = append(ids, body...)
	return append(ids, t.sep), cut
}

// Batch holds a padded batch of encoded texts as row-major [Size, SeqLen]
// matrices, the inputs of a BERT graph.
type Batch struct {
	Size, SeqLen int
	// InputIDs are the token ids, padded on the right with the pad id.
	InputIDs []int64
	// AttentionMask is 1 on real tokens, 0 on padding.
	AttentionMask []int64
	// TokenTypeIDs are all 0 (single-segment inputs).
	TokenTypeIDs []int64
	// Lengths are the numbers of real tokens per row.
	Lengths []int
	// Cut marks the rows whose text had more wordpieces than the row
	// holds (truncated to the sequence length or maxLen).
	Cut []bool
}

// EncodeBatch encodes texts and pads them to a common length: seqLen when
// it is positive (longer texts are truncated to it), else the longest
// encoded text, capped at maxLen when maxLen is positive.
func (t *Tokenizer) EncodeBatch(texts []string, seqLen, maxLen int) (*Batch, error) {
	if len(texts) == 0 {
		return nil, fmt.Errorf("tokenize: no texts to encode")
	}
	if seqLen > 0 && seqLen < 2 {
		return nil, fmt.Errorf("tokenize: sequence length %d is below 2 ([CLS] and [SEP])", seqLen)
	}
	limit := maxLen
	if seqLen > 0 {
		limit = seqLen
	}
	rows := make([][]int64, len(texts))
	cut := make([]bool, len(texts))
	n := seqLen
	for i, s := range texts {
		rows[i], cut[i] = t.EncodeCut(s, limit)
		if seqLen <= 0 && len(rows[i]) > n {
			n = len(rows[i])
		}
	}
	b := &Batch{
		Size: len(texts), SeqLen: n,
		InputIDs:      make([]int64, len(texts)*n),
		AttentionMask: make([]int64, len(texts)*n),
		TokenTypeIDs:  make([]int64, len(texts)*n),
		Lengths:       make([]int, len(texts)),
		Cut:           cut,
	}
	for i, r := range rows {
		b.Lengths[i] = len(r)
		for j := 0; j < n; j++ {
			if j < len(r) {
				b.InputIDs[i*n+j] = r[j]
				b.AttentionMask[i*n+j] = 1
			} else {
				b.InputIDs[i*n+j] = t.pad
			}
		}
	}
	return b, nil
}
