package embed

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/linearize/linearize/tokenize"
)

var evalWords = strings.Fields("river stone cloud paper garden window lamp forest music table bridge winter " +
	"letter candle mirror orange silver harbor engine meadow")

// evalTokenizer knows evalWords, the document markers, '.', and a few
// code characters; every word is one wordpiece.
func evalTokenizer(t *testing.T) *tokenize.Tokenizer {
	t.Helper()
	vocab := map[string]int64{}
	for _, w := range append([]string{"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", ".", "{", "}", "=", "(", ")", ";"},
		append(evalWords, "alpha", "beta", "gamma", "delta", "epsilon")...) {
		vocab[w] = int64(len(vocab))
	}
	tok, err := tokenize.New(vocab, tokenize.DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// evalDoc is a marker line, a blank line and n sentences of 8 words and a
// full stop (9 wordpieces each); the words follow from seed, so that no
// two sentences are alike.
func evalDoc(marker string, n int, seed uint64) string {
	var b strings.Builder
	b.WriteString(marker + "\n\n")
	x := seed*2654435761 + 12345
	for i := 0; i < n; i++ {
		for j := 0; j < 8; j++ {
			x = x*6364136223846793005 + 1442695040888963407
			if j > 0 {
				b.WriteByte(' ')
			}
			b.WriteString(evalWords[(x>>33)%uint64(len(evalWords))])
		}
		b.WriteString(".")
		if i%3 == 2 {
			b.WriteString("\n")
		} else {
			b.WriteString(" ")
		}
	}
	return b.String()
}

// folded joins a text's words with single spaces.
func folded(s string) string { return strings.Join(strings.Fields(s), " ") }

// TestPassages checks the passages against the documents independently
// of Spans: each passage's position, found by tokenizing the text before
// it, lies in its bucket; its text is gone from the returned document and
// the rest of the cut document is there in order.
func TestEvalPassages(t *testing.T) {
	tok := evalTokenizer(t)
	var docs []Document
	for i := 0; i < 6; i++ {
		docs = append(docs, Document{ID: fmt.Sprintf("d%d", i), Text: evalDoc("alpha", 30, uint64(i))})
	}
	docs = append(docs, Document{ID: "short", Text: evalDoc("beta", 5, 99)})
	o := EvalOptions{MaxTokens: 200, Buckets: []int{0, 50, 100, 200}, PerBucket: 2, Seed: 1}
	qs, kept, err := Passages(tok, docs, o)
	if err != nil {
		t.Fatal(err)
	}
	if len(kept) != 6 {
		t.Fatalf("kept %d documents, want the 6 long ones (the 46-wordpiece one is below 200)", len(kept))
	}
	perDoc := map[int][]Query{}
	for _, q := range qs {
		if q.DocID != docs[q.Doc].ID || kept[q.Doc].ID != q.DocID {
			t.Fatalf("query %+v names the wrong document", q)
		}
		perDoc[q.Doc] = append(perDoc[q.Doc], q)
	}
	for d, list := range perDoc {
		checkDocPassages(t, tok, o, docs[d], kept[d], list)
	}
	if len(perDoc) != 6 {
		t.Errorf("passages from %d documents, want 6", len(perDoc))
	}

	checkPassageDraws(t, tok, docs, o, qs, kept)

	// Too short: a clear error naming the length needed.
	_, _, err = Passages(tok, docs[6:], o)
	if !errors.Is(err, ErrTooShort) || !strings.Contains(err.Error(), "200 wordpieces") || !strings.Contains(err.Error(), "has 46") {
		t.Errorf("short documents: %v", err)
	}
}

// checkDocPassages checks the passages list drawn from doc, which
// Passages returned as kept: see TestEvalPassages.
func checkDocPassages(t *testing.T, tok *tokenize.Tokenizer, o EvalOptions, doc, kept Document, list []Query) {
	t.Helper()
	// The cut document: its first 200 wordpieces, whole words.
	orig := strings.Fields(doc.Text)
	cut := []string{}
	n := 0
	for _, w := range orig {
		k := len(tok.Tokenize(w))
		if n+k > o.MaxTokens {
			break
		}
		cut = append(cut, w)
		n += k
	}
	cutText := strings.Join(cut, " ")
	rest := cutText
	perBucket := map[int]int{}
	for _, q := range list {
		i := strings.Index(cutText, q.Text)
		if i < 0 || strings.Count(cutText, q.Text) != 1 {
			t.Fatalf("%s: passage %q not found once in the cut document", q.DocID, q.Text)
		}
		start := len(tok.Tokenize(cutText[:i]))
		if start != q.Start || len(tok.Tokenize(q.Text)) != q.Tokens {
			t.Errorf("%s: passage at %d with %d wordpieces, reported %d and %d", q.DocID, start, len(tok.Tokenize(q.Text)), q.Start, q.Tokens)
		}
		if lo, hi := o.Buckets[q.Bucket], o.Buckets[q.Bucket+1]; start < lo || start >= hi || start+q.Tokens > o.MaxTokens {
			t.Errorf("%s: passage at %d+%d in bucket %d–%d", q.DocID, start, q.Tokens, lo, hi)
		}
		if s := strings.Count(q.Text, "."); s < 1 || s > 3 || s != q.Sentences || !strings.HasSuffix(q.Text, ".") {
			t.Errorf("%s: passage %q is not 1–3 whole sentences (%d reported)", q.DocID, q.Text, q.Sentences)
		}
		if strings.Contains(folded(kept.Text), q.Text) {
			t.Errorf("%s: passage %q still in the document", q.DocID, q.Text)
		}
		rest = strings.Replace(rest, q.Text, "", 1)
		perBucket[q.Bucket]++
	}
	if got := folded(kept.Text); got != folded(rest) {
		t.Errorf("%s: returned document\n%q\nwant the cut document without its passages\n%q", doc.ID, got, folded(rest))
	}
	// Each passage put back at its At, the last first, gives the cut
	// document again.
	back := kept.Text
	for i := len(list) - 1; i >= 0; i-- {
		q := list[i]
		if q.At < 0 || q.At > len(back) || i > 0 && list[i-1].At > q.At {
			t.Fatalf("%s: passage %d at byte %d of %d, the one before at %d", doc.ID, i, q.At, len(back), list[max(0, i-1)].At)
		}
		back = back[:q.At] + " " + q.Text + " " + back[q.At:]
	}
	if folded(back) != cutText {
		t.Errorf("%s: the passages put back at their At give\n%q\nwant the cut document\n%q", doc.ID, folded(back), cutText)
	}
	for b := 0; b < 3; b++ {
		if perBucket[b] != 2 {
			t.Errorf("%s: %d passages in bucket %d, want 2", doc.ID, perBucket[b], b)
		}
	}
}

// checkPassageDraws checks that Passages draws qs and kept from docs
// again for o's seed, others for another seed, and a document's passages
// whatever the other documents.
func checkPassageDraws(t *testing.T, tok *tokenize.Tokenizer, docs []Document, o EvalOptions, qs []Query, kept []Document) {
	t.Helper()
	// Deterministic for a seed, different for another.
	again, kept2, err := Passages(tok, docs, o)
	if err != nil || !reflect.DeepEqual(again, qs) || !reflect.DeepEqual(kept2, kept) {
		t.Errorf("same seed, different passages (err %v)", err)
	}
	o.Seed = 2
	other, _, err := Passages(tok, docs, o)
	if err != nil || reflect.DeepEqual(other, qs) {
		t.Errorf("seeds 1 and 2 draw the same passages (err %v)", err)
	}
	// A document's draw does not depend on the others.
	one, _, err := Passages(tok, docs[3:4], o)
	if err != nil {
		t.Fatal(err)
	}
	var want []Query
	for _, q := range other {
		if q.DocID == "d3" {
			q.Doc = 0
			want = append(want, q)
		}
	}
	if !reflect.DeepEqual(one, want) {
		t.Errorf("d3 alone gives %v, among the others %v", one, want)
	}
}

// TestEvalPassagesSkipCode: sentences that look like code, are indented,
// or have fewer than 5 words are never passages.
func TestEvalPassagesSkipCode(t *testing.T) {
	tok := evalTokenizer(t)
	text := evalDoc("alpha", 4, 1) + "\n\nriver = stone ( cloud ) ; paper garden window.\n" +
		"    river stone cloud paper garden window lamp.\n" + "river stone cloud.\n" +
		"lamp { forest music table bridge } winter.\n"
	text += strings.Repeat("river stone cloud. ", 20)
	o := EvalOptions{MaxTokens: 64, Buckets: []int{0, 36, 64}, PerBucket: 3, Seed: 3}
	for seed := uint64(0); seed < 20; seed++ {
		o.Seed = seed
		qs, _, err := Passages(tok, []Document{{ID: "x", Text: text}}, o)
		if err != nil || len(qs) < 2 || len(qs) > 3 {
			t.Fatalf("seed %d: %d passages (want 2–3 from the 4 sentences of the first bucket), %v", seed, len(qs), err)
		}
		for _, q := range qs {
			if q.Bucket != 0 || strings.ContainsAny(q.Text, "{=;") || strings.HasPrefix(q.Text, "river stone cloud paper garden window lamp") {
				t.Fatalf("seed %d: passage %+v", seed, q)
			}
		}
	}
}

// fakeEncoder embeds texts by a lookup function.
type fakeEncoder func(string) []float32

func (f fakeEncoder) Embed(texts []string) ([][]float32, error) {
	out := make([][]float32, len(texts))
	for i, s := range texts {
		out[i] = f(s)
	}
	return out, nil
}

// closingEncoder counts its Close calls.
type closingEncoder struct {
	Encoder
	closed *int
}

func (c closingEncoder) Close() error { *c.closed++; return nil }

// TestEvalRanks builds vectors with known ranks: documents are the unit
// vectors e_d; the passage of document d in bucket 0 leans towards d
// other documents (weight 2 against 1 for its own), so its document
// ranks d+1; passages in bucket 1 point at their own document (rank 1).
func TestEvalRanks(t *testing.T) {
	fx := newRankFixture(t)
	constant := fakeEncoder(func(string) []float32 { return []float32{1, 1, 1} })
	opened, closed := 0, 0
	same := func() (Encoder, error) { opened++; return closingEncoder{fx.docVec, &closed}, nil }
	systems := []System{{Name: "chunk", Encoder: fx.docVec}, {Name: "same", Open: same}, {Name: "constant", Encoder: constant}}
	r, err := Evaluate(fx.tok, fx.docs, fx.query, systems, fx.o)
	if err != nil {
		t.Fatal(err)
	}
	if opened != 1 || closed != 1 {
		t.Errorf("a system given by Open was opened %d times and closed %d times, want once", opened, closed)
	}
	checkRankReport(t, r)
	checkAgainstConstant(t, fx, systems)

	md := r.Markdown()
	for _, want := range []string{"| chunk | 0.806 | 0.667 |", "| same |", "| constant | 0.333 | 0.000 |", "(reference)", "MRR 0–32 (3)", "ΔMRR vs chunk", "+0.000 [+0.000, +0.000]"} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q:\n%s", want, md)
		}
	}
	if _, err := json.Marshal(r); err != nil {
		t.Error(err)
	}

	// Errors: unknown reference, duplicate names, mismatched dimensions.
	o := fx.o
	for _, c := range []struct {
		sys []System
		ref string
	}{
		{systems, "nope"},
		{[]System{{Name: "a", Encoder: fx.docVec}, {Name: "a", Encoder: fx.docVec}}, ""},
		{[]System{{Name: "short", Encoder: fakeEncoder(func(string) []float32 { return []float32{1, 0} })}}, ""},
		{[]System{{Name: "fails", Open: func() (Encoder, error) { return nil, errors.New("no such model") }}}, ""},
	} {
		o.Reference = c.ref
		if _, err := Evaluate(fx.tok, fx.docs, fx.query, c.sys, o); err == nil || !strings.HasPrefix(err.Error(), "embed: ") {
			t.Errorf("%v: error %v", c, err)
		}
	}
}

// rankFixture is TestEvalRanks' documents, passages and encoders.
type rankFixture struct {
	tok           *tokenize.Tokenizer
	docs          []Document
	o             EvalOptions
	query, docVec fakeEncoder
}

// newRankFixture draws one passage per document and bucket from three
// documents and builds the encoders of TestEvalRanks: documents are the
// unit vectors e_d, passages lean as the test describes.
func newRankFixture(t *testing.T) rankFixture {
	t.Helper()
	tok := evalTokenizer(t)
	markers := []string{"alpha", "beta", "gamma"}
	var docs []Document
	for i, m := range markers {
		docs = append(docs, Document{ID: m, Text: evalDoc(m, 12, uint64(i))})
	}
	o := EvalOptions{MaxTokens: 64, Buckets: []int{0, 32, 64}, Seed: 5, Bootstrap: 200}
	qs, _, err := Passages(tok, docs, o)
	if err != nil {
		t.Fatal(err)
	}
	if len(qs) != 6 {
		t.Fatalf("%d passages, want one per document and bucket", len(qs))
	}
	byText := map[string]Query{}
	for _, q := range qs {
		byText[q.Text] = q
	}
	query := fakeEncoder(func(s string) []float32 {
		q, ok := byText[s]
		if !ok {
			t.Fatalf("query encoder got %q, not a passage", s)
		}
		v := make([]float32, 3)
		v[q.Doc] = 1
		if q.Bucket == 0 {
			for k := 1; k <= q.Doc; k++ {
				v[(q.Doc+k)%3] = 2
			}
		}
		return v
	})
	docVec := fakeEncoder(func(s string) []float32 {
		v := make([]float32, 3)
		for i, m := range markers {
			if strings.HasPrefix(s, m+"\n") {
				v[i] = 1
				return v
			}
		}
		t.Fatalf("document without its marker: %q", s)
		return nil
	})
	return rankFixture{tok: tok, docs: docs, o: o, query: query, docVec: docVec}
}

// close12 reports whether a and b agree to 1e-12.
func close12(a, b float64) bool { return math.Abs(a-b) < 1e-12 }

// checkRankReport checks the report of TestEvalRanks' systems chunk, same
// and constant, chunk the reference.
func checkRankReport(t *testing.T, r *Report) {
	t.Helper()
	if r.Documents != 3 || r.Skipped != 0 || r.Queries != 6 || r.Reference != "chunk" || len(r.Buckets) != 2 {
		t.Fatalf("report header %+v", r)
	}
	for si, name := range []string{"chunk", "same"} {
		s := r.Systems[si]
		if s.Name != name || !close12(s.All.MRR, (1+1.0/2+1.0/3+3)/6) || !close12(s.All.R1, 4.0/6) ||
			!close12(s.Buckets[0].MRR, (1+1.0/2+1.0/3)/3) || !close12(s.Buckets[0].R1, 1.0/3) ||
			s.Buckets[1].MRR != 1 || s.Buckets[1].R1 != 1 || s.Buckets[0].Queries != 3 {
			t.Errorf("%s: %+v", name, s)
		}
	}
	for i, q := range r.Passages {
		want := 1
		if q.Bucket == 0 {
			want = q.Doc + 1
		}
		if r.Systems[0].Ranks[i] != want || r.Systems[2].Ranks[i] != 3 {
			t.Errorf("passage %d (document %d, bucket %d): ranks %d and %d, want %d and 3", i, q.Doc, q.Bucket, r.Systems[0].Ranks[i], r.Systems[2].Ranks[i], want)
		}
	}
	if r.Systems[0].Delta != nil {
		t.Errorf("the reference has a difference: %+v", r.Systems[0].Delta)
	}
	// Identical systems: every resample gives exactly 0.
	if d := r.Systems[1].Delta; d == nil || *d != (Interval{}) || len(r.Systems[1].DeltaBuckets) != 2 {
		t.Errorf("identical system: %+v %+v", d, r.Systems[1].DeltaBuckets)
	}
	for _, d := range r.Systems[1].DeltaBuckets {
		if d != (Interval{}) {
			t.Errorf("identical system, bucket: %+v", d)
		}
	}
	// All documents tie: each ranks last (3), so MRR 1/3 and no hit; it is
	// worse than chunk on every document (document gamma: 1/3 = 1/3 in
	// bucket 0 but 1 > 1/3 in bucket 1).
	c := r.Systems[2]
	if !close12(c.All.MRR, 1.0/3) || c.All.R1 != 0 || c.Delta == nil || !close12(c.Delta.Diff, 1.0/3-r.Systems[0].All.MRR) || c.Delta.Hi >= 0 {
		t.Errorf("constant system: %+v delta %+v", c, c.Delta)
	}
}

// checkAgainstConstant evaluates systems with the constant system as the
// reference: chunk is better on every document, the interval lies above
// 0, and the bootstrap is deterministic.
func checkAgainstConstant(t *testing.T, fx rankFixture, systems []System) {
	t.Helper()
	o := fx.o
	o.Reference = "constant"
	r2, err := Evaluate(fx.tok, fx.docs, fx.query, systems, o)
	if err != nil {
		t.Fatal(err)
	}
	if d := r2.Systems[0].Delta; d == nil || d.Lo <= 0 || d.Lo > d.Diff || d.Diff > d.Hi {
		t.Errorf("better on every document: %+v", d)
	}
	if d := r2.Systems[0].DeltaBuckets[1]; !close12(d.Diff, 2.0/3) || d.Lo != d.Hi || !close12(d.Lo, 2.0/3) {
		t.Errorf("bucket 1, better by 2/3 on every query: %+v", d)
	}
	r3, _ := Evaluate(fx.tok, fx.docs, fx.query, systems, o)
	if !reflect.DeepEqual(r3.Systems[0].Delta, r2.Systems[0].Delta) {
		t.Errorf("the bootstrap is not deterministic: %+v %+v", r3.Systems[0].Delta, r2.Systems[0].Delta)
	}
}

func TestEvalDefaults(t *testing.T) {
	for n, want := range map[int][]int{4096: {0, 512, 1024, 2048, 4096}, 256: {0, 256}, 3000: {0, 512, 1024, 2048, 3000}, 8192: {0, 512, 1024, 2048, 4096, 8192}} {
		if got := DefaultBuckets(n); !reflect.DeepEqual(got, want) {
			t.Errorf("DefaultBuckets(%d) = %v, want %v", n, got, want)
		}
	}
	o, err := EvalOptions{}.defaults()
	if err != nil || o.MaxTokens != 4096 || o.MinTokens != 4096 || o.PerBucket != 1 || o.Bootstrap != 1000 {
		t.Errorf("defaults %+v %v", o, err)
	}
	for _, bad := range []EvalOptions{{Buckets: []int{0}}, {Buckets: []int{0, 512, 512}}, {MaxTokens: 100, Buckets: []int{0, 200}}, {PerBucket: -1}} {
		if _, err := bad.defaults(); !errors.Is(err, ErrEvalOption) {
			t.Errorf("%+v: %v", bad, err)
		}
	}
}

// TestEvalRefusesNonFinite: a vector with a NaN or an Inf, from any
// encoder, stops the evaluation (ErrNonFinite) naming the system and the
// document, or the query's document, instead of ranking by NaN.
func TestEvalRefusesNonFinite(t *testing.T) {
	fx := newRankFixture(t)
	nan := float32(math.NaN())
	poisoned := func(bad string) fakeEncoder {
		return func(s string) []float32 {
			if strings.Contains(s, bad) {
				return []float32{nan, 1, float32(math.Inf(1))}
			}
			return fx.docVec(s)
		}
	}
	docs := fx.docs
	_, err := Evaluate(fx.tok, docs, fx.query, []System{{Name: "ok", Encoder: fx.docVec}, {Name: "bad", Encoder: poisoned(docs[1].ID)}}, fx.o)
	if !errors.Is(err, ErrNonFinite) || !strings.Contains(err.Error(), "system bad, document "+docs[1].ID+": its vector has 1 NaN and 1 Inf values") {
		t.Errorf("a document's NaN vector: %v", err)
	}
	query := fakeEncoder(func(s string) []float32 { return []float32{nan, nan, nan} })
	_, err = Evaluate(fx.tok, docs, query, []System{{Name: "ok", Encoder: fx.docVec}}, fx.o)
	if !errors.Is(err, ErrNonFinite) || !strings.Contains(err.Error(), "the query encoder, the passage of document ") {
		t.Errorf("a passage's NaN vector: %v", err)
	}
}
