package finetune

import (
	"fmt"

	"github.com/linearize/linearize/infer"
	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/tokenize"
)

// Calibration is calibration text cut into model inputs: one batch row
// per window of a document, with the document each row comes from, so
// that rows can be held out by document.
type Calibration struct {
	Feed   map[string]*onnx.Tensor // token-level inputs [Rows, SeqLen]
	Doc    []int                   // document index of each row
	Rows   int
	SeqLen int
	Tokens int // real (unpadded) tokens over all rows
}

// DocumentWindows tokenizes docs with tok and cuts each into consecutive
// rows of seqLen tokens, padded to seqLen, keeping at most maxRows rows
// (0: all) taken evenly across the documents (the first rows of every
// document first). Each row is framed [CLS] … [SEP] as a whole, or, with
// frame > 0, every frame tokens of it are (seqLen a multiple of frame):
// the rows then read as a long model made by convert.ToLong reads its
// input, window by window (package embed's long mode). The inputs of the
// model (by role, see infer.InputRole) are filled as infer.TextInputs
// fills them.
func DocumentWindows(tok *tokenize.Tokenizer, inputs []infer.Value, docs []string, seqLen, frame, maxRows int) (*Calibration, error) {
	if err := infer.TextFillable(inputs, "WindowOptions.Inputs"); err != nil {
		return nil, fmt.Errorf("finetune: %w", err)
	}
	if frame <= 0 {
		frame = seqLen
	}
	if frame < 3 || seqLen%frame != 0 {
		return nil, fmt.Errorf("finetune: calibration rows of %d tokens framed every %d: want frames of at least 3 tokens that divide the row", seqLen, frame)
	}
	cs := tok.Encode("", 0) // [CLS] [SEP]
	if len(cs) != 2 {
		return nil, fmt.Errorf("finetune: the tokenizer frames an empty text with %d ids, want [CLS] [SEP]", len(cs))
	}
	body := frame - 2                 // text tokens per frame
	perRow := body * (seqLen / frame) // text tokens per row
	per := make([][][]int64, len(docs))
	for i, d := range docs {
		ids := tok.IDs(d)
		for at := 0; at < len(ids); at += perRow {
			rowIDs := ids[at:min(at+perRow, len(ids))]
			w := make([]int64, 0, seqLen)
			for f := 0; f < len(rowIDs); f += body {
				w = append(w, cs[0])
				w = append(w, rowIDs[f:min(f+body, len(rowIDs))]...)
				w = append(w, cs[1])
			}
			per[i] = append(per[i], w)
		}
	}
	// Round robin over documents: the k-th window of every document before
	// any (k+1)-th, so a cap keeps every document represented.
	var rows [][]int64
	var doc []int
	for k := 0; ; k++ {
		added := false
		for i := range per {
			if k < len(per[i]) {
				rows, doc = append(rows, per[i][k]), append(doc, i)
				added = true
			}
		}
		if !added || (maxRows > 0 && len(rows) >= maxRows) {
			break
		}
	}
	if maxRows > 0 && len(rows) > maxRows {
		rows, doc = rows[:maxRows], doc[:maxRows]
	}
	if len(rows) == 0 {
		return nil, fmt.Errorf("finetune: the calibration documents hold no text")
	}
	n := len(rows)
	c := &Calibration{Doc: doc, Rows: n, SeqLen: seqLen}
	ids := make([]int64, n*seqLen)
	mask := make([]int64, n*seqLen)
	pad := tok.PadID()
	for r, w := range rows {
		for i := 0; i < seqLen; i++ {
			if i < len(w) {
				ids[r*seqLen+i], mask[r*seqLen+i] = w[i], 1
			} else {
				ids[r*seqLen+i] = pad
			}
		}
		c.Tokens += len(w)
	}
	feed, err := infer.TokenFeed(inputs, n, seqLen, ids, mask)
	if err != nil {
		return nil, fmt.Errorf("finetune: %w", err)
	}
	c.Feed = feed
	return c, nil
}

// HoldOut marks every k-th document (k = round(1/fraction), at least 2)
// as held out and returns the per-row marks; documents, not rows, are
// split, so no held-out text is seen in fitting. With fewer than two
// documents nothing can be held out and it returns nil.
func (c *Calibration) HoldOut(fraction float64) []bool {
	docs := 0
	for _, d := range c.Doc {
		docs = max(docs, d+1)
	}
	if docs < 2 || !(fraction > 0) {
		return nil
	}
	k := max(2, int(1/fraction+0.5))
	held := make([]bool, c.Rows)
	for r, d := range c.Doc {
		held[r] = d%k == k-1 || (docs < k && d == docs-1)
	}
	return held
}
