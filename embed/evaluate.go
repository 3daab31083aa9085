package embed

import (
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"sort"
	"strings"
	"time"

	"github.com/linearize/linearize/tokenize"

	"github.com/linearize/linearize/internal/rusage"
)

// An Encoder turns texts into vectors, one per text (*Embedder is one).
type Encoder interface {
	Embed(texts []string) ([][]float32, error)
}

// A ChunkEncoder turns texts into several vectors each, one per chunk
// (*Embedder is one: EmbedChunks).
type ChunkEncoder interface {
	EmbedChunks(texts []string) ([][][]float32, error)
}

// A ChunkSpanner says which part of each text each of its chunk vectors
// reads (*Embedder is one: ChunkSpans). Evaluate uses it to tell whether
// a MaxSim system's best chunk is the one the passage was taken from.
type ChunkSpanner interface {
	ChunkSpans(texts []string) [][]Span
}

// A System is an encoder under evaluation, by name.
type System struct {
	Name    string
	Encoder Encoder
	// MaxSim scores a document by its best chunk: the largest cosine of
	// the query with any of the vectors the encoder's EmbedChunks gives
	// (the encoder must be a ChunkEncoder).
	MaxSim bool
	// Open, used when Encoder is nil, opens the encoder just before the
	// system's pass; Evaluate closes it after the pass when it has a
	// Close() error method. So only one opened system is in memory at a
	// time, and the opening is not timed. Its errors are returned wrapped.
	Open func() (Encoder, error)
}

// EvalOptions configures Passages and Evaluate. The zero value uses the
// defaults given with each field.
type EvalOptions struct {
	// MaxTokens: documents are cut to their first MaxTokens wordpieces
	// (whole words) before anything else, so every system reads the same
	// text (default 4096).
	MaxTokens int
	// MinTokens: documents with fewer wordpieces (before cutting) are
	// skipped (default: the last bucket edge, so that a document fills
	// every bucket).
	MinTokens int
	// Buckets are the edges of the position buckets, in wordpieces
	// (default DefaultBuckets(MaxTokens): 0, 512, 1024, 2048, 4096).
	Buckets []int
	// PerBucket passages are drawn per document and bucket (default 1).
	PerBucket int
	// MaxPassageTokens bounds a passage's length in wordpieces (default
	// 128).
	MaxPassageTokens int
	// Seed seeds the passages and the bootstrap.
	Seed uint64
	// Bootstrap is the number of paired bootstrap resamples over
	// documents (default 1000).
	Bootstrap int
	// Reference names the system the others are compared with (default
	// "chunk" when there is a system of that name, else the first).
	Reference string
	// Batch documents are given to a system's Encoder per call (default
	// 8).
	Batch int
	// Progress, when set, receives a line per batch of documents.
	Progress io.Writer
}

// Bucket is a range of passage start positions [Lo, Hi) in wordpieces.
type Bucket struct {
	Lo      int `json:"lo"`
	Hi      int `json:"hi"`
	Queries int `json:"queries"`
}

// Label is the bucket as "512–1K".
func (b Bucket) Label() string { return tokensLabel(b.Lo) + "–" + tokensLabel(b.Hi) }

func tokensLabel(n int) string {
	if n >= 1024 && n%1024 == 0 {
		return fmt.Sprintf("%dK", n/1024)
	}
	return fmt.Sprint(n)
}

// Score is a system's retrieval quality on a set of queries (all zero when
// Queries is 0).
type Score struct {
	MRR     float64 `json:"mrr"`
	R1      float64 `json:"recall_at_1"`
	Queries int     `json:"queries"`
}

// Interval is a difference of MRR with its paired-bootstrap 95 %
// confidence interval [Lo, Hi] (2.5th and 97.5th percentiles).
type Interval struct {
	Diff float64 `json:"diff"`
	Lo   float64 `json:"lo"`
	Hi   float64 `json:"hi"`
}

// SystemResult is one system's row of a Report.
type SystemResult struct {
	Name string `json:"name"`
	// All is over every query; Buckets follow Report.Buckets.
	All     Score   `json:"all"`
	Buckets []Score `json:"buckets"`
	// Delta is the MRR difference with the reference (this system minus
	// the reference), overall and per bucket; nil for the reference.
	Delta        *Interval  `json:"delta_mrr,omitempty"`
	DeltaBuckets []Interval `json:"delta_mrr_buckets,omitempty"`
	// Seconds is the wall time of embedding every document;
	// SecondsPerDoc divides it by the number of documents.
	Seconds       float64 `json:"seconds"`
	SecondsPerDoc float64 `json:"seconds_per_doc"`
	// PeakRSS is the process's peak resident set size in bytes when the
	// system had embedded the documents: the peak so far, including the
	// systems before it (0: unknown on this system).
	PeakRSS int64 `json:"peak_rss_bytes"`
	// VectorsPerDoc is the vectors stored per document: 1, or a MaxSim
	// system's chunks on average (its storage cost).
	VectorsPerDoc float64 `json:"vectors_per_doc"`
	// Located is, for a MaxSim system whose encoder is a ChunkSpanner,
	// the share of passages whose best chunk, among every document's, is
	// their own document's chunk nearest the place they were taken from
	// (Query.At: a chunk whose span holds it, else the nearest ones),
	// overall and by bucket (the Score's R1, which its MRR equals); nil for the
	// other systems. LocatedDelta is its difference with the first such
	// system's, with a paired bootstrap interval (nil for that system).
	Located             *Score     `json:"located,omitempty"`
	LocatedBuckets      []Score    `json:"located_buckets,omitempty"`
	LocatedDelta        *Interval  `json:"located_delta,omitempty"`
	LocatedDeltaBuckets []Interval `json:"located_delta_buckets,omitempty"`
	// Ranks are the ranks of each passage's document (Report.Passages).
	Ranks []int `json:"ranks"`
}

// Report is the result of Evaluate.
type Report struct {
	// Documents were evaluated; Skipped had fewer than MinTokens
	// wordpieces.
	Documents int `json:"documents"`
	Skipped   int `json:"skipped_documents"`
	Queries   int `json:"queries"`
	MaxTokens int `json:"max_tokens"`
	MinTokens int `json:"min_tokens"`
	PerBucket int `json:"per_bucket"`
	// Buckets are by the passage's position in the document before its
	// passages were removed.
	Buckets   []Bucket `json:"buckets"`
	Seed      uint64   `json:"seed"`
	Bootstrap int      `json:"bootstrap"`
	Reference string   `json:"reference"`
	// QuerySeconds is the time the query encoder took for every passage.
	QuerySeconds float64        `json:"query_seconds"`
	Systems      []SystemResult `json:"systems"`
	// Passages are the queries; SystemResult.Ranks follow their order.
	Passages []Query `json:"passages"`
}

// Evaluate runs the long-document retrieval test: Passages draws passages
// from docs and removes them; query embeds the passages; each system
// embeds every document (cut, without its passages); for each passage
// the documents are ranked by cosine with it, and the reciprocal rank of
// its own document gives MRR and recall@1, overall and per position
// bucket. A document tied with the passage's own document counts as
// ranked above it, so an encoder that cannot tell documents apart scores
// low. The systems' MRR differences with the reference come with a paired
// bootstrap over documents seeded by o.Seed. Systems run one after the
// other, in order.
func Evaluate(tok *tokenize.Tokenizer, docs []Document, query Encoder, systems []System, o EvalOptions) (*Report, error) {
	o, err := o.defaults()
	if err != nil {
		return nil, err
	}
	if query == nil {
		return nil, fmt.Errorf("%w: no query encoder", ErrEvalOption)
	}
	if len(systems) == 0 {
		return nil, fmt.Errorf("%w: no systems to evaluate", ErrEvalOption)
	}
	names := map[string]bool{}
	for _, s := range systems {
		if s.Name == "" || s.Encoder == nil && s.Open == nil {
			return nil, fmt.Errorf("%w: a system needs a name and an encoder (or Open)", ErrEvalOption)
		}
		if names[s.Name] {
			return nil, fmt.Errorf("%w: two systems are named %q", ErrEvalOption, s.Name)
		}
		names[s.Name] = true
	}
	ref := o.Reference
	if ref == "" {
		ref = systems[0].Name
		if names["chunk"] {
			ref = "chunk"
		}
	}
	refIdx := -1
	for i, s := range systems {
		if s.Name == ref {
			refIdx = i
		}
	}
	if refIdx < 0 {
		return nil, fmt.Errorf("%w: the reference system %q is not among the systems", ErrEvalOption, ref)
	}
	queries, kept, err := Passages(tok, docs, o)
	if err != nil {
		return nil, err
	}
	r := &Report{
		Documents: len(kept), Skipped: len(docs) - len(kept), Queries: len(queries),
		MaxTokens: o.MaxTokens, MinTokens: o.MinTokens, PerBucket: o.PerBucket,
		Seed: o.Seed, Bootstrap: o.Bootstrap, Reference: ref, Passages: queries,
	}
	for b := 0; b+1 < len(o.Buckets); b++ {
		r.Buckets = append(r.Buckets, Bucket{Lo: o.Buckets[b], Hi: o.Buckets[b+1]})
	}
	for _, q := range queries {
		r.Buckets[q.Bucket].Queries++
	}

	texts := make([]string, len(queries))
	for i, q := range queries {
		texts[i] = q.Text
	}
	t0 := time.Now()
	qv, err := embedAll(query, texts)
	if err != nil {
		var nf *NonFiniteError
		if errors.As(err, &nf) && nf.Index < len(queries) {
			named := *nf
			named.Text = "the query encoder, the passage of document " + queries[nf.Index].DocID
			return nil, &named
		}
		return nil, fmt.Errorf("embed: embedding the %d passages: %w", len(texts), err)
	}
	r.QuerySeconds = time.Since(t0).Seconds()
	if o.Progress != nil {
		fmt.Fprintf(o.Progress, "embedded %d passages in %.1f s\n", len(texts), r.QuerySeconds)
	}

	// rr[s][q] is the reciprocal rank of query q's document by system s;
	// loc[q] whether its best chunk is the one the passage left, for the
	// systems locIdx.
	rr := make([][]float64, len(systems))
	var loc [][]float64
	var locIdx []int
	for si, s := range systems {
		dv, spans, secs, err := embedSystem(s, kept, o)
		if err != nil {
			return nil, err
		}
		if len(dv[0][0]) != len(qv[0]) {
			return nil, fmt.Errorf("embed: system %s gives %d-dimensional vectors, the query encoder %d", s.Name, len(dv[0][0]), len(qv[0]))
		}
		ranks := rankOwn(qv, dv, queries)
		rr[si] = make([]float64, len(ranks))
		for i, k := range ranks {
			rr[si][i] = 1 / float64(k)
		}
		nvec := 0
		for _, vs := range dv {
			nvec += len(vs)
		}
		res := SystemResult{Name: s.Name, Seconds: secs, SecondsPerDoc: secs / float64(len(kept)), PeakRSS: rusage.PeakRSS(), Ranks: ranks,
			VectorsPerDoc: float64(nvec) / float64(len(kept))}
		res.All, res.Buckets = scores(rr[si], queries, len(r.Buckets))
		if spans != nil {
			hits := located(qv, dv, spans, queries)
			all, per := scores(hits, queries, len(r.Buckets))
			res.Located, res.LocatedBuckets = &all, per
			loc, locIdx = append(loc, hits), append(locIdx, si)
		}
		r.Systems = append(r.Systems, res)
	}
	if len(loc) > 1 {
		deltas := bootstrap(loc, 0, queries, len(kept), len(r.Buckets), o.Bootstrap, o.Seed)
		for k, si := range locIdx[1:] {
			r.Systems[si].LocatedDelta = &deltas[k+1][0]
			r.Systems[si].LocatedDeltaBuckets = deltas[k+1][1:]
		}
	}
	deltas := bootstrap(rr, refIdx, queries, len(kept), len(r.Buckets), o.Bootstrap, o.Seed)
	for si := range r.Systems {
		if si != refIdx {
			r.Systems[si].Delta = &deltas[si][0]
			r.Systems[si].DeltaBuckets = deltas[si][1:]
		}
	}
	return r, nil
}

// embedAll embeds texts and checks the encoder's answer: one vector per
// text, all of one length, all finite (a *NonFiniteError otherwise, as
// Embedder.Embed gives).
func embedAll(e Encoder, texts []string) ([][]float32, error) {
	v, err := e.Embed(texts)
	if err != nil {
		return nil, err
	}
	if len(v) != len(texts) {
		return nil, fmt.Errorf("embed: %d vectors for %d texts", len(v), len(texts))
	}
	for _, x := range v {
		if len(x) == 0 || len(x) != len(v[0]) {
			return nil, fmt.Errorf("embed: vectors of %d and %d dimensions", len(v[0]), len(x))
		}
	}
	if err := checkFinite(v); err != nil {
		return nil, err
	}
	return v, nil
}

// embedSystem opens the system if needed, embeds the documents (one
// vector each, or a MaxSim system's vectors per chunk, with their spans
// when its encoder is a ChunkSpanner), and closes what it opened.
func embedSystem(s System, docs []Document, o EvalOptions) (dv [][][]float32, spans [][]Span, secs float64, err error) {
	if s.Encoder == nil {
		enc, oerr := s.Open()
		if oerr != nil {
			return nil, nil, 0, fmt.Errorf("embed: system %s: %w", s.Name, oerr)
		}
		if enc == nil {
			return nil, nil, 0, fmt.Errorf("embed: system %s: Open returned no encoder", s.Name)
		}
		// Closed when the documents are embedded; a failure to close
		// fails the system (err is the named result).
		if c, ok := enc.(interface{ Close() error }); ok {
			defer func() {
				if cerr := c.Close(); cerr != nil && err == nil {
					dv, spans, err = nil, nil, fmt.Errorf("embed: system %s: %w", s.Name, cerr)
				}
			}()
		}
		s.Encoder = enc
	}
	if dv, secs, err = embedDocs(s, docs, o); err != nil {
		return nil, nil, 0, err
	}
	sp, ok := s.Encoder.(ChunkSpanner)
	if !s.MaxSim || !ok {
		return dv, nil, secs, nil
	}
	texts := make([]string, len(docs))
	for i, d := range docs {
		texts[i] = d.Text
	}
	spans = sp.ChunkSpans(texts)
	if len(spans) != len(docs) {
		return nil, nil, 0, fmt.Errorf("embed: system %s: chunk spans of %d documents for %d", s.Name, len(spans), len(docs))
	}
	for i := range docs {
		if len(spans[i]) != len(dv[i]) {
			return nil, nil, 0, fmt.Errorf("embed: system %s: document %s has %d chunk vectors but %d spans", s.Name, docs[i].ID, len(dv[i]), len(spans[i]))
		}
	}
	return dv, spans, secs, nil
}

// embedDocs embeds every document with one system, o.Batch at a time,
// and returns the vectors (per document: one, or a MaxSim system's one
// per chunk) and the seconds spent in the encoder.
func embedDocs(s System, docs []Document, o EvalOptions) ([][][]float32, float64, error) {
	var out [][][]float32
	var secs float64
	var ce ChunkEncoder
	if s.MaxSim {
		var ok bool
		if ce, ok = s.Encoder.(ChunkEncoder); !ok {
			return nil, 0, fmt.Errorf("%w: system %s scores by its best chunk (MaxSim) but its encoder gives one vector per text", ErrEvalOption, s.Name)
		}
	}
	for at := 0; at < len(docs); at += o.Batch {
		batch := docs[at:min(at+o.Batch, len(docs))]
		texts := make([]string, len(batch))
		for i, d := range batch {
			texts[i] = d.Text
		}
		t0 := time.Now()
		var v [][][]float32
		var err error
		if ce != nil {
			v, err = embedChunksAll(ce, texts)
		} else {
			var one [][]float32
			one, err = embedAll(s.Encoder, texts)
			for _, x := range one {
				v = append(v, [][]float32{x})
			}
		}
		secs += time.Since(t0).Seconds()
		if err != nil {
			var nf *NonFiniteError
			if errors.As(err, &nf) && nf.Index < len(batch) {
				named := *nf
				named.Index += at
				named.Text = "system " + s.Name + ", document " + batch[nf.Index].ID
				return nil, 0, &named
			}
			return nil, 0, fmt.Errorf("embed: system %s, documents %d–%d (%s…): %w", s.Name, at+1, at+len(batch), batch[0].ID, err)
		}
		if len(out) > 0 && len(v[0][0]) != len(out[0][0]) {
			return nil, 0, fmt.Errorf("embed: system %s gives vectors of %d and %d dimensions", s.Name, len(out[0][0]), len(v[0][0]))
		}
		out = append(out, v...)
		if o.Progress != nil {
			fmt.Fprintf(o.Progress, "%s: %d/%d documents, %.3f s/doc\n", s.Name, len(out), len(docs), secs/float64(len(out)))
		}
	}
	return out, secs, nil
}

// embedChunksAll embeds texts with a ChunkEncoder and checks its answer
// as embedAll does: at least one vector per text, all of one length,
// all finite.
func embedChunksAll(e ChunkEncoder, texts []string) ([][][]float32, error) {
	v, err := e.EmbedChunks(texts)
	if err != nil {
		return nil, err
	}
	if len(v) != len(texts) {
		return nil, fmt.Errorf("embed: vectors of %d texts for %d texts", len(v), len(texts))
	}
	for i, vs := range v {
		if len(vs) == 0 {
			return nil, fmt.Errorf("embed: no vector for text %d", i+1)
		}
		for _, x := range vs {
			if len(x) == 0 || len(x) != len(v[0][0]) {
				return nil, fmt.Errorf("embed: vectors of %d and %d dimensions", len(v[0][0]), len(x))
			}
		}
		if err := checkFinite(vs); err != nil {
			nf := err.(*NonFiniteError)
			nf.Index = i
			return nil, nf
		}
	}
	return v, nil
}

// maxCosine is the largest cosine of q with any of vs (maxsim; for one
// vector, its cosine).
func maxCosine(q []float32, vs [][]float32) float64 {
	best := math.Inf(-1)
	for _, v := range vs {
		best = max(best, Cosine(q, v))
	}
	return best
}

// rankOwn ranks the documents by cosine with each query (a document of
// several vectors by its best one): the rank of a query's own document
// is 1 + the number of other documents whose score is at least as high.
func rankOwn(qv [][]float32, dv [][][]float32, queries []Query) []int {
	out := make([]int, len(queries))
	for i, q := range queries {
		own := maxCosine(qv[i], dv[q.Doc])
		rank := 1
		for d := range dv {
			if d != q.Doc && maxCosine(qv[i], dv[d]) >= own {
				rank++
			}
		}
		out[i] = rank
	}
	return out
}

// located is, per query, 1 when its best chunk among every document's
// (by cosine; the first on a tie) is a chunk of its own document nearest
// to where the passage was taken out, else 0. A chunk's distance to that
// place is 0 when its span holds it, else the bytes to its nearer end.
func located(qv [][]float32, dv [][][]float32, spans [][]Span, queries []Query) []float64 {
	out := make([]float64, len(queries))
	for i, q := range queries {
		bestDoc, bestChunk, best := -1, -1, math.Inf(-1)
		for d, vs := range dv {
			for k, v := range vs {
				if c := Cosine(qv[i], v); c > best {
					bestDoc, bestChunk, best = d, k, c
				}
			}
		}
		if bestDoc != q.Doc {
			continue
		}
		dist := func(s Span) int {
			switch {
			case q.At < s.Start:
				return s.Start - q.At
			case q.At > s.End:
				return q.At - s.End
			}
			return 0
		}
		nearest := math.MaxInt
		for _, s := range spans[q.Doc] {
			nearest = min(nearest, dist(s))
		}
		if dist(spans[q.Doc][bestChunk]) == nearest {
			out[i] = 1
		}
	}
	return out
}

// scores averages reciprocal ranks overall and per bucket.
func scores(rr []float64, queries []Query, buckets int) (Score, []Score) {
	var all Score
	per := make([]Score, buckets)
	for i, q := range queries {
		hit := 0.0
		if rr[i] == 1 {
			hit = 1
		}
		for _, s := range []*Score{&all, &per[q.Bucket]} {
			s.MRR += rr[i]
			s.R1 += hit
			s.Queries++
		}
	}
	for _, s := range append([]*Score{&all}, ptrs(per)...) {
		if s.Queries > 0 {
			s.MRR /= float64(s.Queries)
			s.R1 /= float64(s.Queries)
		}
	}
	return all, per
}

func ptrs(s []Score) []*Score {
	out := make([]*Score, len(s))
	for i := range s {
		out[i] = &s[i]
	}
	return out
}

// bootstrap returns, per system, the MRR difference with the reference
// and its 95 % interval from n paired resamples of the documents that
// have queries: index 0 over all queries, 1+b over bucket b. A resample
// with no query in a bucket is left out of that bucket's interval.
func bootstrap(rr [][]float64, ref int, queries []Query, docs, buckets, n int, seed uint64) [][]Interval {
	// sum[s][d][c] is the summed difference of document d's queries in
	// column c (0: all, 1+b: bucket b); cnt[d][c] their number.
	cols := 1 + buckets
	cnt := make([][]int, docs)
	for d := range cnt {
		cnt[d] = make([]int, cols)
	}
	sum := make([][][]float64, len(rr))
	for s := range rr {
		sum[s] = make([][]float64, docs)
		for d := range sum[s] {
			sum[s][d] = make([]float64, cols)
		}
		for i, q := range queries {
			diff := rr[s][i] - rr[ref][i]
			sum[s][q.Doc][0] += diff
			sum[s][q.Doc][1+q.Bucket] += diff
		}
	}
	for _, q := range queries {
		cnt[q.Doc][0]++
		cnt[q.Doc][1+q.Bucket]++
	}
	var withQ []int
	for d := range cnt {
		if cnt[d][0] > 0 {
			withQ = append(withQ, d)
		}
	}
	out := make([][]Interval, len(rr))
	samples := make([][][]float64, len(rr)) // [s][c][resample]
	for s := range rr {
		out[s] = make([]Interval, cols)
		samples[s] = make([][]float64, cols)
		for c := 0; c < cols; c++ {
			tot, k := 0.0, 0
			for d := range cnt {
				tot += sum[s][d][c]
				k += cnt[d][c]
			}
			if k > 0 {
				out[s][c].Diff = tot / float64(k)
			}
		}
	}
	rng := rand.New(rand.NewPCG(seed, 0x626f6f74))
	pick := make([]int, len(withQ))
	tot := make([]float64, cols)
	k := make([]int, cols)
	for range n {
		for i := range pick {
			pick[i] = withQ[rng.IntN(len(withQ))]
		}
		for c := range k {
			k[c] = 0
		}
		for _, d := range pick {
			for c := range k {
				k[c] += cnt[d][c]
			}
		}
		for s := range rr {
			if s == ref {
				continue
			}
			for c := range tot {
				tot[c] = 0
			}
			for _, d := range pick {
				for c := range tot {
					tot[c] += sum[s][d][c]
				}
			}
			for c := range tot {
				if k[c] > 0 {
					samples[s][c] = append(samples[s][c], tot[c]/float64(k[c]))
				}
			}
		}
	}
	for s := range rr {
		for c := range out[s] {
			out[s][c].Lo, out[s][c].Hi = percentile(samples[s][c], 0.025), percentile(samples[s][c], 0.975)
		}
	}
	return out
}

// percentile is the p-quantile of x, interpolated linearly between order
// statistics; 0 for no values.
func percentile(x []float64, p float64) float64 {
	if len(x) == 0 {
		return 0
	}
	sort.Float64s(x)
	f := p * float64(len(x)-1)
	i := int(math.Floor(f))
	if i+1 >= len(x) {
		return x[len(x)-1]
	}
	if x[i] == x[i+1] {
		return x[i]
	}
	return x[i] + (f-float64(i))*(x[i+1]-x[i])
}

// Markdown renders the report as two tables a reader can paste: per
// system MRR and recall@1 overall, MRR per bucket, ΔMRR against the
// reference with its 95 % interval, seconds per document and peak RSS;
// then recall@1 and ΔMRR per bucket.
func (r *Report) Markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d documents (%d skipped: fewer than %d wordpieces), cut to %d wordpieces; %d queries (%d per document and bucket, removed from their documents).\n\n",
		r.Documents, r.Skipped, r.MinTokens, r.MaxTokens, r.Queries, r.PerBucket)
	head := []string{"system", "MRR", "R@1"}
	for _, bk := range r.Buckets {
		head = append(head, fmt.Sprintf("MRR %s (%d)", bk.Label(), bk.Queries))
	}
	head = append(head, "ΔMRR vs "+r.Reference+" [95% CI]", "s/doc", "vectors/doc", "peak RSS")
	row(&b, head)
	row(&b, dashes(len(head)))
	for _, s := range r.Systems {
		cells := []string{s.Name, fmt.Sprintf("%.3f", s.All.MRR), fmt.Sprintf("%.3f", s.All.R1)}
		for _, sc := range s.Buckets {
			cells = append(cells, scoreCell(sc, sc.MRR))
		}
		cells = append(cells, deltaCell(s.Delta), fmt.Sprintf("%.3f", s.SecondsPerDoc), fmt.Sprintf("%.1f", s.VectorsPerDoc), rssCell(s.PeakRSS))
		row(&b, cells)
	}
	b.WriteString("\n")
	head = []string{"system"}
	for _, bk := range r.Buckets {
		head = append(head, "R@1 "+bk.Label())
	}
	for _, bk := range r.Buckets {
		head = append(head, "ΔMRR "+bk.Label())
	}
	row(&b, head)
	row(&b, dashes(len(head)))
	for _, s := range r.Systems {
		cells := []string{s.Name}
		for _, sc := range s.Buckets {
			cells = append(cells, scoreCell(sc, sc.R1))
		}
		for i, bk := range r.Buckets {
			if s.Delta == nil || bk.Queries == 0 || i >= len(s.DeltaBuckets) {
				cells = append(cells, "–")
				continue
			}
			cells = append(cells, deltaCell(&s.DeltaBuckets[i]))
		}
		row(&b, cells)
	}
	fmt.Fprintf(&b, "\nBuckets by the passage's wordpiece position (query counts in brackets). ΔMRR: this system minus %s, paired bootstrap over documents (%d resamples, seed %d). Peak RSS is the process peak when the system had finished, including the systems above it (they run in table order).\n",
		r.Reference, r.Bootstrap, r.Seed)
	r.locatedTable(&b)
	return b.String()
}

// locatedTable renders, when a system has them, the Located scores: the
// share of passages whose best chunk is the one they were taken from,
// overall and per bucket, and the difference with the first such system.
func (r *Report) locatedTable(b *strings.Builder) {
	first := ""
	for _, s := range r.Systems {
		if s.Located != nil && first == "" {
			first = s.Name
		}
	}
	if first == "" {
		return
	}
	head := []string{"system", "chunk R@1"}
	for _, bk := range r.Buckets {
		head = append(head, "chunk R@1 "+bk.Label())
	}
	head = append(head, "Δ vs "+first+" [95% CI]")
	b.WriteString("\n")
	row(b, head)
	row(b, dashes(len(head)))
	for _, s := range r.Systems {
		if s.Located == nil {
			continue
		}
		cells := []string{s.Name, fmt.Sprintf("%.3f", s.Located.R1)}
		for _, sc := range s.LocatedBuckets {
			cells = append(cells, scoreCell(sc, sc.R1))
		}
		row(b, append(cells, deltaCell(s.LocatedDelta)))
	}
	b.WriteString("\nchunk R@1: the share of passages whose best chunk, among every document's, is their own document's chunk nearest the place they were taken from (the chunk around the gap they left).\n")
}

func row(b *strings.Builder, cells []string) {
	b.WriteString("| " + strings.Join(cells, " | ") + " |\n")
}

func dashes(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = "---"
	}
	return out
}

func scoreCell(s Score, v float64) string {
	if s.Queries == 0 {
		return "–"
	}
	return fmt.Sprintf("%.3f", v)
}

func deltaCell(d *Interval) string {
	if d == nil {
		return "(reference)"
	}
	return fmt.Sprintf("%+.3f [%+.3f, %+.3f]", d.Diff, d.Lo, d.Hi)
}

func rssCell(n int64) string {
	if n <= 0 {
		return "?"
	}
	return fmt.Sprintf("%.0f MiB", float64(n)/(1<<20))
}
