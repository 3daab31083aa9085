package embed

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"math"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/linearize/linearize/convert"
	"github.com/linearize/linearize/infer"
	"github.com/linearize/linearize/onnx"
	"github.com/linearize/linearize/onnx/onnxpb"
	"github.com/linearize/linearize/tokenize"
)

// Mode is how a text longer than one window is read.
type Mode string

// The reading modes.
const (
	// Auto is Long for a model written by `convert long` (its
	// metadata_props have the key "linearize.window") and, when no Window
	// is given, for a long-context model: one whose own limit
	// (convert.ContextLimit) is above LongContext tokens, such as
	// ModernBERT or an encoder whose table was extended. Otherwise it is
	// Chunk.
	Auto Mode = ""
	// Truncate reads [CLS], the first Window−2 wordpieces and [SEP] in one
	// pass.
	Truncate Mode = "truncate"
	// Chunk cuts the text's wordpieces into consecutive chunks of Window−2
	// (overlapping by Overlap), runs each as [CLS] chunk [SEP], and
	// returns the mean of the L2-normalised chunk embeddings weighted by
	// their wordpieces (normalised again unless Raw): a 15-wordpiece tail
	// counts 15/510 of a full chunk, not as much as one.
	Chunk Mode = "chunk"
	// Chunks cuts the text as Chunk does but keeps one vector per chunk
	// (EmbedChunks; Embed refuses it): for late interaction, a document
	// scored by its best chunk (maxsim).
	Chunks Mode = "chunks"
	// Long reads the whole text (up to MaxTokens) in one pass:
	// [CLS] tokens [SEP]. A text longer than the model admits is an error.
	Long Mode = "long"
	// Late is late chunking: the text is cut into Chunks mode's chunks
	// (Window−2 wordpieces each, overlapping by Overlap; Window is
	// LateWindow by default), but each chunk's vector is the mean of its
	// wordpieces' hidden states in a pass over the whole text, so that
	// every chunk is read in the context of the document (Günther et
	// al., 2024). A text longer than one pass of the model's limit is
	// read in passes that overlap: a chunk lies whole in the pass it is
	// pooled from, with at least an eighth of a pass of text on each
	// side of it where the text has that much and the chunk leaves
	// room. A model written by `convert long` reads the text in one
	// pass, and its chunks are its windows. One vector per chunk
	// (EmbedChunks), as in Chunks mode, so that the two compare chunk
	// for chunk.
	Late Mode = "late"
)

// chunked reports whether the mode cuts texts into chunks of Window−2
// wordpieces that may overlap (Chunk, Chunks and Late).
func (m Mode) chunked() bool { return m == Chunk || m == Chunks || m == Late }

// PerChunk reports whether the mode gives one vector per chunk (Chunks
// and Late: EmbedChunks; Embed refuses them) rather than one per text.
func (m Mode) PerChunk() bool { return m == Chunks || m == Late }

// LateWindow is Late mode's window when Options.Window is 0: chunks of
// 510 wordpieces (at most the model's limit).
const LateWindow = 512

// LongContext is the limit, in tokens, above which a model is a
// long-context model that Auto mode reads whole (Long): 512, the
// positions of BERT and of most encoders read in chunks.
const LongContext = 512

// Pooling is how the last hidden state of one pass becomes one vector.
type Pooling string

// The poolings.
const (
	// PoolAuto is the pooling the sentence-transformers files beside the
	// model set (modules.json and its Pooling module's config.json), else
	// PoolMean.
	PoolAuto Pooling = ""
	// PoolMean is the mean of the last hidden state over the attention
	// mask, [CLS] and [SEP] included (as sentence-transformers does).
	// With a prompt, when the model's Pooling config sets include_prompt
	// false (as INSTRUCTOR-style models do), [CLS] and the prompt are left
	// out of it and of PoolMax, in every window: the tokens
	// sentence-transformers leaves out (its prompt_length, the prompt
	// tokenized alone with its special tokens, but the last).
	PoolMean Pooling = "mean"
	// PoolCLS is the last hidden state at position 0 ([CLS]).
	PoolCLS Pooling = "cls"
	// PoolMax is the per-feature maximum over the attention mask.
	PoolMax Pooling = "max"
	// PoolOutput is the model's own: the output read is one vector per
	// text, [batch, dim] (bge-m3's exports with dense, sparse and ColBERT
	// heads write the dense vector as dense or dense_vecs). It is chosen
	// with that output, never as an option.
	PoolOutput Pooling = "output"
)

// Metadata keys of a model written by `convert long` (the same as
// convert.MetaWindow and convert.MetaMaxLength).
const (
	// MetaWindow is the model's window in tokens; its presence makes
	// Auto mode Long.
	MetaWindow = "linearize.window"
	// MetaMaxLength is the longest input in tokens the model reads.
	MetaMaxLength = "linearize.max_length"
)

// ErrBackend is matched by errors.Is for a failure of the inference
// backend (opening or running a session), as against an error in the
// model, its files or the texts.
var ErrBackend = errors.New("embed: backend failure")

// backendError marks err as ErrBackend without changing its message.
type backendError struct{ err error }

func (b backendError) Error() string   { return b.err.Error() }
func (b backendError) Unwrap() []error { return []error{b.err, ErrBackend} }

// ErrNonFinite is matched by errors.Is when a text's vector holds a NaN
// or an Inf (the model's output is not finite: NaN or Inf weights, an
// overflow in float16). Embed returns a *NonFiniteError for it: a vector
// that is not finite is never returned.
var ErrNonFinite = errors.New("embed: vector is not finite")

// NonFiniteError is the error of a text whose vector holds NaN or Inf
// values: Index is the text's index in the call, NaN and Inf count the
// values. Text, when set, names the text in the message (Evaluate sets
// it to the system and the document).
type NonFiniteError struct {
	Index, NaN, Inf int
	Text            string
}

func (e *NonFiniteError) Error() string {
	what := e.Text
	if what == "" {
		what = "text " + strconv.Itoa(e.Index+1)
	}
	return fmt.Sprintf("embed: %s: its vector has %s (the model's output is not finite)", what, e.Values())
}

// Values words the counts: "12 NaN and 3 Inf values".
func (e *NonFiniteError) Values() string {
	var n []string
	if e.NaN > 0 {
		n = append(n, strconv.Itoa(e.NaN)+" NaN")
	}
	if e.Inf > 0 {
		n = append(n, strconv.Itoa(e.Inf)+" Inf")
	}
	return strings.Join(n, " and ") + " values"
}

func (e *NonFiniteError) Is(target error) bool { return target == ErrNonFinite }

// checkFinite returns a *NonFiniteError for the first vector of vecs
// that holds a NaN or an Inf.
func checkFinite(vecs [][]float32) error {
	for i, v := range vecs {
		nan, inf := 0, 0
		for _, x := range v {
			switch f := float64(x); {
			case math.IsNaN(f):
				nan++
			case math.IsInf(f, 0):
				inf++
			}
		}
		if nan+inf > 0 {
			return &NonFiniteError{Index: i, NaN: nan, Inf: inf}
		}
	}
	return nil
}

// DefaultBatch is the number of texts or chunks per run when
// Options.Batch is 0.
const DefaultBatch = 8

// Options configures Open. The zero value embeds in Auto mode with the
// model's own pooling, normalised, on the default backend.
type Options struct {
	Mode    Mode
	Pooling Pooling
	// Raw skips the final L2 normalisation (by default vectors have unit
	// norm, as retrieval by cosine wants; sentence-transformers models with
	// a Normalize module normalise too). Chunk mode still averages
	// normalised chunk embeddings.
	Raw bool
	// MaxTokens: at most this many wordpieces of each text are read, in
	// every mode (so that modes compare on the same text). 0: Long mode
	// admits up to the model's limit minus 2 (a longer text is an error),
	// Truncate reads Window−2, Chunk reads everything.
	MaxTokens int
	// Window is the tokens per pass in Truncate and Chunk mode, [CLS] and
	// [SEP] included. 0: the metadata "linearize.window" when present, else
	// the model's limit (convert.ContextLimit: its position table, else
	// the config.json beside it, else its doc string), else 512; in the
	// last two cases at most MaxWindow when that is set.
	Window int
	// MaxWindow, when positive and Window is 0, bounds the default window
	// (evaluate reads its truncate and chunk baselines in windows of at
	// most 512 tokens, whatever the model's limit). It does not make Auto
	// mode Chunk.
	MaxWindow int
	// Overlap is the wordpieces each chunk of Chunk and Chunks mode
	// shares with the one before it (0: consecutive chunks); it must be
	// below Window−2.
	Overlap int
	// Batch is the number of texts (Truncate) or chunks (Chunk) per run;
	// 0 means DefaultBatch. Long mode runs one text at a time.
	Batch int
	// Backend names the infer backend; "" is infer.DefaultBackend.
	Backend string
	// Threads bounds the backend's intra-op threads (0: its default).
	Threads int
	// Vocab is the tokenizer's path (a folder, tokenizer.json or
	// vocab.txt); "" finds it beside the model (tokenize.Find).
	Vocab string
	// Output is the model output to read; "" chooses (chooseOutput): the
	// hidden states (a rank-3 output named like last_hidden_state or
	// token_embeddings), else a pooled sentence vector [batch, dim] named
	// like one (sentence_embedding, dense, dense_vecs; never
	// pooler_output), else the first rank-3 floating-point output that is
	// no per-token head of another kind (ColBERT, sparse weights). When
	// the sentence-transformers files list a module after the pooling
	// that embed does not apply (a Dense projection), only such a
	// sentence vector is the model's, and Open refuses a model without
	// one. A [batch, dim] output is read as it is (PoolOutput).
	Output string
	// Inputs gives the model inputs that carry no tokens, fed unchanged
	// with every pass: by input name, a number or a .npy or TensorProto
	// .pb file (infer.InputValue). jina-embeddings-v3's export takes the
	// index of its task adapter this way (task_id: 0 retrieval.query,
	// 1 retrieval.passage, 2 separation, 3 classification,
	// 4 text-matching, in its config's lora_adaptations).
	Inputs map[string]string
	// Prompt is text that begins every text, as sentence-transformers'
	// prompts do ("search_query: " for nomic-embed-text, "query: " for
	// e5): its wordpieces follow [CLS] in every pass, every chunk
	// included, and the text's own wordpieces fill the rest of the
	// window. A prompt is tokenized apart from the text, so a pass is
	// what sentence-transformers reads for prompt+text when the prompt
	// ends in white space, as published ones do; one that does not is
	// read as if a space followed it. PromptName names one of the
	// prompts of the sentence-transformers files beside the model
	// (config_sentence_transformers.json) instead. Set at most one; with
	// neither, that file's default_prompt_name applies when it names
	// one, as in sentence-transformers.
	Prompt, PromptName string
	// Dim, when positive, keeps the first Dim values of each pooled
	// vector (before chunks are averaged and vectors normalised): the
	// smaller vectors of a Matryoshka-trained model (nomic-embed-text-v1.5,
	// jina-embeddings-v3, gte-modernbert), as sentence-transformers'
	// truncate_dim gives them. It must not exceed the model's width.
	Dim int
}

// Embedder embeds texts with one model. Its methods may be called from
// several goroutines; runs are serialised.
type Embedder struct {
	path string
	// opts are the options Open was given (Write records the backend and
	// the tokenizer's path, and batches documents by them).
	opts      Options
	mode      Mode
	pooling   Pooling
	poolFrom  string // where the pooling came from: "option", the config file, "default"
	normalise bool
	maxTokens int
	window    int
	overlap   int
	limit     int
	limitSrc  string // where limit comes from, for messages
	limitKind convert.LimitKind
	// stOthers are the modules the sentence-transformers files (stFile)
	// list besides the Transformer, Pooling and Normalize ones: the
	// hidden states pooled are then not the model's vectors.
	stOthers  []string
	stFile    string
	longModel bool // written by `convert long` (MetaWindow present)
	// trained is the length a rotary model scaled by `convert
	// extend-positions` was trained for (convert.MetaTrainedPositions),
	// or 0: a pass within it is padded no further than it.
	trained   int
	batch     int
	dim       int
	truncDim  int // Options.Dim: the values of each vector kept, or 0
	fixedSeq  int // a sequence length the model's inputs declare, or 0
	fixedRows int // a batch size the model's inputs declare, or 0
	output    string
	tok       *tokenize.Tokenizer
	cls, sep  int64
	inputs    []infer.Value           // the token-level inputs
	fixed     map[string]*onnx.Tensor // Options.Inputs, read
	hasMask   bool                    // an attention-mask input: padding changes nothing
	// The prompt (Options.Prompt), its name and where it came from
	// (choosePrompt), its wordpieces without its trailing white space,
	// and that white space, which begins each text before it is
	// tokenized. includePrompt is false when the Pooling config
	// (promptPoolFile) sets include_prompt false; mean and max pooling
	// then leave out the first unpooled tokens of each window (choosePrompt).
	prompt, promptName, promptFrom string
	promptIDs                      []int64
	promptSpace                    string
	includePrompt                  bool
	promptPoolFile                 string
	unpooled                       int

	mu   sync.Mutex
	sess infer.Session
	// read counts the wordpieces of the texts embedded (Wordpieces).
	read atomic.Int64
}

// Open loads the model at modelPath (onnx.Load), its tokenizer and pooling
// configuration, and opens an inference session.
func Open(modelPath string, o Options) (*Embedder, error) {
	if err := o.check(); err != nil {
		return nil, err
	}
	m, err := onnx.Load(modelPath)
	if err != nil {
		return nil, fmt.Errorf("embed: %w", err)
	}
	tok, err := tokenize.Find(o.Vocab, modelPath)
	if err != nil {
		return nil, fmt.Errorf("embed: %s: %w", modelPath, err)
	}
	e := &Embedder{path: modelPath, opts: o, tok: tok, normalise: !o.Raw, maxTokens: o.MaxTokens, batch: o.Batch, overlap: o.Overlap, truncDim: o.Dim}
	if e.batch == 0 {
		e.batch = DefaultBatch
	}
	if err := e.readMarkers(); err != nil {
		return nil, err
	}
	if err := e.readLengths(m, o.Window, o.MaxWindow, o.Mode); err != nil {
		return nil, err
	}
	if err := e.choosePooling(o.Pooling); err != nil {
		return nil, err
	}
	if e.fixed, err = infer.ReadFixedInputs(m, o.Inputs); err != nil {
		return nil, fmt.Errorf("embed: %s: %w", modelPath, err)
	}
	backend := o.Backend
	if backend == "" {
		backend = infer.DefaultBackend
	}
	sess, err := infer.Open(backend, m, infer.Options{Threads: o.Threads})
	if err != nil {
		return nil, backendError{fmt.Errorf("embed: %s: %w", modelPath, err)}
	}
	e.sess = sess
	if err := e.setup(o.Output, o.Window > 0); err != nil {
		sess.Close()
		return nil, err
	}
	if err := e.choosePrompt(o); err != nil {
		sess.Close()
		return nil, err
	}
	if err := e.latePooling(); err != nil {
		sess.Close()
		return nil, err
	}
	return e, nil
}

// latePooling makes Late mode's pooling the mean of each chunk's
// wordpieces, whatever the model's own: late chunking is defined by it,
// and it needs the hidden states.
func (e *Embedder) latePooling() error {
	if e.mode != Late {
		return nil
	}
	switch e.pooling {
	case PoolOutput:
		return fmt.Errorf("embed: %s: late mode pools each chunk's wordpieces from the hidden states, but output %s is one vector per text (%s)", e.path, e.output, e.poolFrom)
	case PoolMean:
		return nil
	}
	e.poolFrom = fmt.Sprintf("late chunking's mean over each chunk, not the model's %s from %s", e.pooling, e.poolFrom)
	e.pooling = PoolMean
	return nil
}

// check validates the options Open reads before loading anything.
func (o Options) check() error {
	switch o.Mode {
	case Auto, Truncate, Chunk, Chunks, Long, Late:
	default:
		return fmt.Errorf("embed: mode %q: want truncate, chunk, chunks, long or late", o.Mode)
	}
	switch o.Pooling {
	case PoolAuto, PoolMean, PoolCLS, PoolMax:
	default:
		return fmt.Errorf("embed: pooling %q: want mean, cls or max", o.Pooling)
	}
	if o.MaxTokens < 0 || o.Window < 0 || o.MaxWindow < 0 || o.Batch < 0 || o.Threads < 0 || o.Overlap < 0 || o.Dim < 0 {
		return fmt.Errorf("embed: MaxTokens, Window, MaxWindow, Batch, Threads, Overlap and Dim must be non-negative")
	}
	if o.Overlap > 0 && !o.Mode.chunked() {
		return fmt.Errorf("embed: an overlap of %d wordpieces needs chunk, chunks or late mode", o.Overlap)
	}
	if o.Mode == Late && o.Pooling != PoolAuto && o.Pooling != PoolMean {
		return fmt.Errorf("embed: late mode pools each chunk's wordpieces by their mean, not by %s", o.Pooling)
	}
	if o.Window > 0 && o.Window < 3 {
		return fmt.Errorf("embed: window %d is too small: [CLS], [SEP] and at least one wordpiece need 3", o.Window)
	}
	if o.MaxWindow > 0 && o.MaxWindow < 3 {
		return fmt.Errorf("embed: max window %d is too small: [CLS], [SEP] and at least one wordpiece need 3", o.MaxWindow)
	}
	return nil
}

// readMarkers finds the ids of the tokenizer's [CLS] and [SEP].
func (e *Embedder) readMarkers() error {
	topt := e.tok.Options()
	var ok1, ok2 bool
	e.cls, ok1 = e.tok.ID(topt.Classify)
	e.sep, ok2 = e.tok.ID(topt.Separator)
	if !ok1 || !ok2 {
		return fmt.Errorf("embed: %s: the tokenizer lacks %s or %s", e.path, topt.Classify, topt.Separator)
	}
	return nil
}

// readLengths sets the longest input the model admits (convert.
// ContextLimit, or a long model's metadata), the window (the option, else
// what a long model's metadata says, else LateWindow in Late mode or the
// limit, else 512; these last three bounded by the limit and maxWindow)
// and the mode (Auto: Long for a model written by `convert long`, or,
// when no window is given, for a model whose limit is above LongContext;
// else Chunk).
func (e *Embedder) readLengths(m *onnxpb.ModelProto, window, maxWindow int, mode Mode) error {
	metaWindow, isLong, err := metadataWindow(m)
	if err != nil {
		return fmt.Errorf("embed: %s: %w", e.path, err)
	}
	e.longModel = isLong
	lim, err := convert.ContextLimit(m, e.path)
	if err != nil {
		return fmt.Errorf("embed: %s: %w", e.path, err)
	}
	e.limit, e.limitSrc, e.limitKind = lim.Tokens, lim.Source, lim.Kind
	if e.trained, _, err = metadataInt(m, convert.MetaTrainedPositions, 1); err != nil {
		return fmt.Errorf("embed: %s: %w", e.path, err)
	}
	if isLong {
		// A model written by `convert long` says how long an input it reads.
		if n, ok, err := metadataInt(m, MetaMaxLength, 3); err != nil {
			return fmt.Errorf("embed: %s: %w", e.path, err)
		} else if ok {
			e.limit, e.limitSrc, e.limitKind = n, "metadata "+MetaMaxLength+" of a model written by convert long", convert.LimitTable
		}
	}
	switch {
	case window > 0:
		e.window = window
	case metaWindow > 0:
		e.window = metaWindow
	case mode == Late:
		e.window = LateWindow
		if e.limit > 0 {
			e.window = min(e.window, e.limit)
		}
		if maxWindow > 0 {
			e.window = min(e.window, maxWindow)
		}
	case e.limit > 0:
		e.window = e.limit
		if maxWindow > 0 {
			e.window = min(e.window, maxWindow)
		}
	default:
		e.window = 512
		if maxWindow > 0 {
			e.window = min(e.window, maxWindow)
		}
	}
	e.mode = mode
	if e.mode == Auto {
		e.mode = Chunk
		if isLong || window == 0 && e.limit > LongContext {
			e.mode = Long
		}
	}
	if e.mode != Long && e.limit > 0 && e.window > e.limit {
		return fmt.Errorf("embed: window %d is longer than model %s admits (%d tokens); the limit is from %s", e.window, e.path, e.limit, e.limitSrc)
	}
	if isLong && window > 0 && window != metaWindow && (e.mode == Long || e.mode == Late) {
		return fmt.Errorf("embed: %s was written by `convert long` with windows of %d tokens, and %s mode frames a text in them: the window must be %d (or 0), not %d", e.path, metaWindow, e.mode, metaWindow, window)
	}
	if e.mode == Late && isLong && e.overlap > 0 {
		return fmt.Errorf("embed: %s was written by `convert long`: late mode's chunks are its windows of %d tokens, which do not overlap (Overlap %d)", e.path, e.window, e.overlap)
	}
	if e.overlap > 0 && e.overlap >= e.window-2 {
		return fmt.Errorf("embed: an overlap of %d wordpieces leaves no new wordpiece in a window of %d tokens (%d wordpieces with [CLS] and [SEP])", e.overlap, e.window, e.window-2)
	}
	return nil
}

// choosePooling sets the pooling: the option, else the sentence-
// transformers configuration beside the model, else mean.
func (e *Embedder) choosePooling(p Pooling) error {
	st, err := readSTConfig(e.path)
	if err != nil {
		return err
	}
	e.includePrompt = true
	if st != nil {
		e.stOthers, e.stFile = st.others, filepath.Join(st.dir, "modules.json")
		e.includePrompt, e.promptPoolFile = !st.excludePrompt, st.poolFile
	}
	e.pooling, e.poolFrom = p, "option"
	if e.pooling != PoolAuto {
		return nil
	}
	e.pooling, e.poolFrom = PoolMean, "default"
	if st != nil && st.pooling != "" {
		e.pooling, e.poolFrom = st.pooling, filepath.Join(st.dir, "modules.json")
	}
	return nil
}

// metadataWindow reads the MetaWindow metadata: its value, and whether
// the key is present.
func metadataWindow(m *onnxpb.ModelProto) (int, bool, error) {
	return metadataInt(m, MetaWindow, 3)
}

// metadataInt reads an integer metadata_props entry of at least least:
// its value, and whether the key is present.
func metadataInt(m *onnxpb.ModelProto, key string, least int) (int, bool, error) {
	for _, p := range m.GetMetadataProps() {
		if p.GetKey() != key {
			continue
		}
		n, err := strconv.Atoi(strings.TrimSpace(p.GetValue()))
		if err != nil || n < least {
			return 0, true, fmt.Errorf("metadata %s = %q is not a number of at least %d tokens", key, p.GetValue(), least)
		}
		return n, true, nil
	}
	return 0, false, nil
}

// fixedNote describes the inputs fed unchanged (Options.Inputs) for the
// manifest's settings: "task_id=int64[] 4", each value written out when
// it has at most 8 elements, else the SHA-256 of its .npy encoding; ""
// when none.
func (e *Embedder) fixedNote() string {
	var parts []string
	for _, name := range slices.Sorted(maps.Keys(e.fixed)) {
		t := e.fixed[name]
		var v string
		if t.Len() <= 8 {
			v = strings.Trim(fmt.Sprint(t.Data), "[]")
		} else if h := sha256.New(); onnx.EncodeNPY(h, t) == nil {
			v = "sha256 " + hex.EncodeToString(h.Sum(nil))
		} else {
			v = "unhashable" // read from a file, so never
		}
		parts = append(parts, fmt.Sprintf("%s=%s %s", name, t, v))
	}
	return strings.Join(parts, "; ")
}

// setup checks the session's inputs, chooses the output to pool and finds
// the embedding dimension.
func (e *Embedder) setup(output string, explicitWindow bool) error {
	for _, in := range e.sess.Inputs() {
		if e.fixed[in.Name] == nil {
			e.inputs = append(e.inputs, in)
		}
	}
	if err := infer.TextFillable(e.inputs, "Inputs"); err != nil {
		return fmt.Errorf("embed: %s: %w", e.path, err)
	}
	for _, in := range e.inputs {
		if infer.InputRole(in.Name) == infer.RoleMask {
			e.hasMask = true
		}
		if len(in.Shape) != 0 && len(in.Shape) != 2 {
			return fmt.Errorf("embed: %s: input %q has rank %d, want [batch, sequence]", e.path, in.Name, len(in.Shape))
		}
		if len(in.Shape) == 2 {
			if v := int(in.Shape[1].Value); v > 0 {
				e.fixedSeq = v
			}
			if v := int(in.Shape[0].Value); v > 0 {
				e.fixedRows = v
			}
		}
	}
	if e.fixedSeq > 0 && e.fixedSeq < e.window && e.mode != Long {
		if explicitWindow {
			return fmt.Errorf("embed: window %d is longer than the %d tokens the inputs of %s declare", e.window, e.fixedSeq, e.path)
		}
		e.window = e.fixedSeq
	}
	if e.fixedRows > 0 {
		e.batch = e.fixedRows
	}
	outs := e.sess.Outputs()
	var names []string
	for _, v := range outs {
		names = append(names, v.Name)
	}
	if output == "" {
		output = chooseOutput(outs)
		if len(e.stOthers) > 0 && !slices.ContainsFunc(outs, func(v infer.Value) bool { return v.Name == output && len(v.Shape) == 2 }) {
			// Pooled hidden states would miss those modules; a sentence
			// vector the export computes includes them.
			if output = sentenceOutput(outs); output == "" {
				return fmt.Errorf("embed: %s lists %s after the pooling, which embed does not apply, and %s has no [batch, dim] sentence output that includes it: pooled hidden states would not be the model's vectors (export the model with its sentence_embedding output)",
					e.stFile, strings.Join(e.stOthers, ", "), e.path)
			}
		}
	}
	for _, v := range outs {
		if v.Name != output {
			continue
		}
		e.output = v.Name
		switch len(v.Shape) {
		case 3:
			e.dim = int(v.Shape[2].Value)
		case 2:
			if e.poolFrom == "option" {
				return fmt.Errorf("embed: %s: output %s is pooled already (%s, one vector per text); pooling %s applies to hidden states", e.path, v.Name, infer.FormatDims(v.Shape), e.pooling)
			}
			e.pooling, e.poolFrom = PoolOutput, "output "+v.Name+" is "+infer.FormatDims(v.Shape)
			e.dim = int(v.Shape[1].Value)
		}
	}
	if e.output == "" {
		if output == "" {
			return fmt.Errorf("embed: %s has no rank-3 float output of hidden states nor a [batch, dim] sentence vector (outputs %s); name the one to read", e.path, strings.Join(names, ", "))
		}
		return fmt.Errorf("embed: %s has no output %q (outputs %s)", e.path, output, strings.Join(names, ", "))
	}
	if e.dim <= 0 { // not declared: run [CLS] [SEP] once to see it
		if _, err := e.runPass([]pass{{ids: []int64{e.cls, e.sep}}}); err != nil {
			return err
		}
	}
	if e.truncDim > e.dim {
		return fmt.Errorf("embed: Dim %d (--dim) is more than the %d values of %s's vectors", e.truncDim, e.dim, e.path)
	}
	return nil
}

// Mode is the resolved reading mode.
func (e *Embedder) Mode() Mode { return e.mode }

// Pooling is the resolved pooling.
func (e *Embedder) Pooling() Pooling { return e.pooling }

// Dim is the length of the vectors.
func (e *Embedder) Dim() int {
	if e.truncDim > 0 {
		return e.truncDim
	}
	return e.dim
}

// Window is the tokens per pass in Truncate and Chunk mode, [CLS] and
// [SEP] included.
func (e *Embedder) Window() int { return e.window }

// Overlap is the wordpieces consecutive chunks share (Chunk, Chunks).
func (e *Embedder) Overlap() int { return e.overlap }

// Normalised reports whether vectors are L2-normalised (not Raw).
func (e *Embedder) Normalised() bool { return e.normalise }

// MaxTokens is the wordpieces of a text read at most (0: all).
func (e *Embedder) MaxTokens() int { return e.maxTokens }

// Wordpieces is the number of wordpieces read from the texts embedded
// so far, [CLS] and [SEP] not counted: each text's, up to MaxTokens (and
// a window's in Truncate mode). Over the time the calls took, it is the
// embedder's throughput in wordpieces per second.
func (e *Embedder) Wordpieces() int64 { return e.read.Load() }

// Output is the model output pooled.
func (e *Embedder) Output() string { return e.output }

// Limit is the most tokens per pass the model admits, [CLS] and [SEP]
// included: the metadata "linearize.max_length" of a model written by
// `convert long`, else convert.ContextLimit (its position table, else
// the config.json beside it, else its doc string); 0 when none says it.
func (e *Embedder) Limit() int { return e.limit }

// ContextLimit is Limit with where it comes from (Source: "config.json
// beside the model (m/config.json): max_position_embeddings 8192"), as
// convert.ContextLimit gives it; for a model written by `convert long`
// with the metadata "linearize.max_length", that value (Kind
// convert.LimitTable: the model's table was grown to it).
func (e *Embedder) ContextLimit() convert.Limit {
	return convert.Limit{Tokens: e.limit, Kind: e.limitKind, Source: e.limitSrc}
}

// Tokenizer is the model's tokenizer.
func (e *Embedder) Tokenizer() *tokenize.Tokenizer { return e.tok }

// String is a one-line description: model, mode, pooling (and where it
// came from), window, limit, normalisation, and the inputs fed unchanged
// and the prompt when there are.
func (e *Embedder) String() string {
	norm := "normalise"
	if !e.normalise {
		norm = "raw"
	}
	lim := "none"
	if e.limit > 0 {
		lim = strconv.Itoa(e.limit)
		if e.limitSrc != "" {
			lim += " (" + e.limitSrc + ")"
		}
	}
	dim := strconv.Itoa(e.Dim())
	if e.truncDim > 0 {
		dim += fmt.Sprintf(" (the first %d of %d)", e.truncDim, e.dim)
	}
	s := fmt.Sprintf("%s: mode %s, pooling %s (%s), window %d, limit %s, dim %s, %s",
		e.path, e.mode, e.pooling, e.poolFrom, e.window, lim, dim, norm)
	if e.overlap > 0 {
		s += fmt.Sprintf(", overlap %d", e.overlap)
	}
	if e.maxTokens > 0 {
		s += fmt.Sprintf(", max tokens %d", e.maxTokens)
	}
	if note := e.fixedNote(); note != "" {
		s += ", inputs " + note
	}
	if e.prompt != "" {
		s += fmt.Sprintf(", prompt %q", e.prompt)
		if e.promptName != "" {
			s += fmt.Sprintf(" (%s in %s)", e.promptName, e.promptFrom)
		}
		if e.unpooled > 0 {
			s += fmt.Sprintf(" (not pooled: include_prompt false in %s)", e.promptPoolFile)
		}
	}
	return s
}

// PromptUnpooled reports whether [CLS] and the prompt's wordpieces are
// left out of the mean or max pooling of each window, as the model's
// Pooling config (include_prompt false) says.
func (e *Embedder) PromptUnpooled() bool { return e.unpooled > 0 }

// Prompt is the text that begins every text (Options.Prompt, or the
// prompt PromptName or the model's default_prompt_name names), "" when
// none.
func (e *Embedder) Prompt() string { return e.prompt }

// Close releases the session.
func (e *Embedder) Close() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.sess == nil {
		return nil
	}
	err := e.sess.Close()
	e.sess = nil
	return err
}

// pass is one run's row: the text it belongs to and its token ids, [CLS]
// and [SEP] included. In Late mode spans are the ranges [from, to) of
// ids whose hidden states are pooled (by their mean), one vector each;
// otherwise the row is pooled whole into one vector.
type pass struct {
	text  int
	ids   []int64
	spans [][2]int
}

// vectors is the number of vectors the pass gives.
func (ps pass) vectors() int { return max(1, len(ps.spans)) }

// weight is the pass's wordpieces of its text ([CLS], [SEP] and the
// prompt's p left out): a chunk's weight in Chunk mode's mean.
func (ps pass) weight(p int) float64 { return float64(max(1, len(ps.ids)-2-p)) }

// Embed returns one vector per text, each of Dim values. An empty text is
// read as [CLS] [SEP]. When a text's vector holds a NaN or an Inf, no
// vector is returned and the error is a *NonFiniteError naming the first
// such text (errors.Is ErrNonFinite).
func (e *Embedder) Embed(texts []string) ([][]float32, error) {
	if len(texts) == 0 {
		return nil, nil
	}
	if e.mode.PerChunk() {
		return nil, fmt.Errorf("embed: %s mode gives one vector per chunk: use EmbedChunks", e.mode)
	}
	passes, read, err := e.plan(texts)
	if err != nil {
		return nil, err
	}
	sums := make([][]float64, len(texts))
	weights := make([]float64, len(texts))
	err = e.runPasses(passes, func(p pass, v []float64) {
		w := 1.0
		if e.mode == Chunk {
			// Each chunk's unit vector counts by its wordpieces.
			normalise(v)
			w = p.weight(len(e.promptIDs))
			for k := range v {
				v[k] *= w
			}
		}
		if sums[p.text] == nil {
			sums[p.text] = v
		} else {
			for k, x := range v {
				sums[p.text][k] += x
			}
		}
		weights[p.text] += w
	})
	if err != nil {
		return nil, err
	}
	out := make([][]float32, len(texts))
	for i, v := range sums {
		if weights[i] != 1 {
			for k := range v {
				v[k] /= weights[i]
			}
		}
		if e.normalise {
			normalise(v)
		}
		out[i] = toFloat32(v)
	}
	if err := checkFinite(out); err != nil {
		return nil, err
	}
	e.read.Add(read)
	return out, nil
}

// EmbedChunks returns, per text, one vector per chunk in order (Chunk
// mode's chunks: Window−2 wordpieces each, overlapping by Overlap), each
// L2-normalised unless Raw; Truncate gives one chunk, Long one pass, and
// Late the same chunks as Chunks, each pooled from a pass over the text.
// When a chunk's vector holds a NaN or an Inf the error is a
// *NonFiniteError naming its text.
func (e *Embedder) EmbedChunks(texts []string) ([][][]float32, error) {
	if len(texts) == 0 {
		return nil, nil
	}
	passes, read, err := e.plan(texts)
	if err != nil {
		return nil, err
	}
	out := make([][][]float32, len(texts))
	err = e.runPasses(passes, func(p pass, v []float64) {
		if e.normalise {
			normalise(v)
		}
		out[p.text] = append(out[p.text], toFloat32(v))
	})
	if err != nil {
		return nil, err
	}
	for i, vs := range out {
		if err := checkFinite(vs); err != nil {
			nf := err.(*NonFiniteError)
			nf.Index = i
			return nil, nf
		}
	}
	e.read.Add(read)
	return out, nil
}

// runPasses runs the passes in batches and hands each pass's pooled
// vector to use, in order.
func (e *Embedder) runPasses(passes []pass, use func(p pass, v []float64)) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.sess == nil {
		return errors.New("embed: Embed after Close")
	}
	// Rows per run: Batch, but no more than maxBatchTokens tokens of
	// windows (a model read in chunks of thousands of tokens runs one at a
	// time: eight full-attention rows of 4K tokens need over 24 GB), and
	// one at a time in Long mode.
	step := max(1, min(e.batch, maxBatchTokens/e.window))
	if e.mode == Long || e.mode == Late {
		step = 1
	}
	for lo := 0; lo < len(passes); lo += step {
		group := passes[lo:min(lo+step, len(passes))]
		vecs, err := e.runPass(group)
		if err != nil {
			return fmt.Errorf("%w (texts %d–%d)", err, group[0].text, group[len(group)-1].text)
		}
		k := 0
		for _, p := range group {
			for range p.vectors() {
				use(p, vecs[k])
				k++
			}
		}
	}
	return nil
}

// plan tokenizes the texts and cuts them into passes as the mode says.
func (e *Embedder) plan(texts []string) (passes []pass, read int64, err error) {
	p := len(e.promptIDs)
	frame := func(i int, body []int64) pass {
		ids := make([]int64, 0, len(body)+2+p)
		ids = append(ids, e.cls)
		ids = append(ids, e.promptIDs...)
		ids = append(ids, body...)
		return pass{text: i, ids: append(ids, e.sep)}
	}
	keep := e.keep()
	for i, s := range texts {
		// Only the wordpieces kept are tokenized: a text of any length
		// read in Truncate mode or with MaxTokens costs what they do.
		toks := e.tok.IDsLimit(e.promptSpace+s, keep)
		read += int64(len(toks))
		switch e.mode {
		case Truncate:
			passes = append(passes, frame(i, toks[:min(len(toks), e.window-2-p)]))
		case Chunk, Chunks:
			for _, c := range e.chunks(len(toks)) {
				passes = append(passes, frame(i, toks[c[0]:c[1]]))
			}
		case Long:
			if err := e.fitsLong(i, toks); err != nil {
				return nil, 0, err
			}
			if e.longModel {
				passes = append(passes, e.framed(i, toks))
				break
			}
			passes = append(passes, frame(i, toks))
		case Late:
			if e.longModel {
				if err := e.fitsLong(i, toks); err != nil {
					return nil, 0, err
				}
				passes = append(passes, e.framedLate(i, toks))
				break
			}
			chunks := e.chunks(len(toks))
			m := len(toks)
			if lim := e.longLimit(); lim > 0 {
				m = min(m, lim-2-p)
			}
			ranges, owner := latePlan(chunks, len(toks), m)
			j := 0 // owners are in order: each pass takes the next chunks
			for k, r := range ranges {
				ps := frame(i, toks[r[0]:r[1]])
				for ; j < len(chunks) && owner[j] == k; j++ {
					c := chunks[j]
					ps.spans = append(ps.spans, [2]int{1 + p + c[0] - r[0], 1 + p + c[1] - r[0]})
				}
				passes = append(passes, ps)
			}
		}
	}
	return passes, read, nil
}

// fitsLong returns an error when text i's wordpieces toks do not fit in
// one Long pass.
func (e *Embedder) fitsLong(i int, toks []int64) error {
	need := len(toks) + 2 + len(e.promptIDs)
	if e.longModel {
		need = e.framedLen(len(toks))
	}
	if lim := e.longLimit(); lim > 0 && need > lim {
		return fmt.Errorf("embed: text %d has %d wordpieces (%d tokens with [CLS], [SEP]%s), but model %s admits %d tokens per pass (%s), %d wordpieces; %s",
			i, len(toks), need, e.promptNote(), e.path, lim, e.longLimitSource(), e.longFits(lim), e.longHint())
	}
	return nil
}

// chunks are the ranges [lo, hi) of a text's n wordpieces that the mode
// reads, one per vector EmbedChunks gives: one of the first Window−2
// (Truncate), all of them (Long), or cutChunks' chunks (Chunk, Chunks,
// Late; a `convert long` model's windows in Late mode, which do not
// overlap). The prompt's wordpieces are not counted.
func (e *Embedder) chunks(n int) [][2]int {
	w := e.window - 2 - len(e.promptIDs)
	switch e.mode {
	case Truncate:
		return [][2]int{{0, min(n, w)}}
	case Long:
		return [][2]int{{0, n}}
	}
	return cutChunks(n, w, e.overlap)
}

// A Span is the part of a text a vector reads: the UTF-8 byte offsets
// [Start, End) of the words its wordpieces belong to.
type Span struct{ Start, End int }

// ChunkSpans returns, per text, the span of each vector EmbedChunks gives
// for it, in order: each chunk's words, from the one that holds its first
// wordpiece to the one that holds its last (so that chunks cut inside a
// word share it), as offsets into the text as given (the prompt not
// included). An empty text, or one of no wordpieces, gives the span
// [0, 0). It tokenizes the texts and runs no model.
func (e *Embedder) ChunkSpans(texts []string) [][]Span {
	out := make([][]Span, len(texts))
	skip := len(e.promptSpace) // the white space put before each text
	for i, s := range texts {
		words := e.tok.SpansLimit(e.promptSpace+s, e.keep())
		// end[j] is the number of wordpieces up to and including word j.
		end := make([]int, len(words))
		total := 0
		for j, w := range words {
			total += w.Pieces
			end[j] = total
		}
		// word is the index of the word that holds wordpiece k.
		word := func(k int) int {
			j, _ := slices.BinarySearch(end, k+1)
			return j
		}
		n := total // the wordpieces plan reads
		if k := e.keep(); k > 0 {
			n = min(n, k)
		}
		for _, c := range e.chunks(n) {
			if c[1] == c[0] {
				out[i] = append(out[i], Span{})
				continue
			}
			a, b := words[word(c[0])].Start, words[word(c[1]-1)].End
			out[i] = append(out[i], Span{max(0, a-skip), max(0, b-skip)})
		}
	}
	return out
}

// cutChunks cuts n wordpieces into chunks [lo, hi) of size wordpieces
// (the last may be shorter), each overlapping the one before by overlap
// (< size); no wordpieces give one empty chunk.
func cutChunks(n, size, overlap int) [][2]int {
	var out [][2]int
	for lo := 0; ; lo += size - overlap {
		hi := min(lo+size, n)
		out = append(out, [2]int{lo, hi})
		if hi == n {
			return out
		}
	}
}

// lateContext is the part of a pass of Late mode, 1/lateContext, that a
// chunk has at least on either side where the text has it.
const lateContext = 8

// latePlan groups a text's chunks (cutChunks of its n wordpieces) into
// the passes of Late mode, each a range [a, b) of at most m wordpieces:
// ranges in order, and for each chunk the index of the range it is
// pooled from. A text of at most m wordpieces is one pass. A longer one
// is read in overlapping passes: a chunk stays in the current pass while
// it lies whole within it with m/lateContext wordpieces after it (or the
// text's end); the next chunk begins a pass that starts that many
// wordpieces before it (fewer at the text's start and end, or when the
// chunk is longer than m minus them). Each chunk is then pooled with that
// much context on both sides where the text has it and the chunk leaves
// room (one longer than m − 2m/lateContext wordpieces has less). Every
// chunk must be at most m wordpieces.
func latePlan(chunks [][2]int, n, m int) (ranges [][2]int, owner []int) {
	c := m / lateContext
	owner = make([]int, len(chunks))
	for j, ch := range chunks {
		lo, hi := ch[0], ch[1]
		if k := len(ranges) - 1; k >= 0 {
			if b := ranges[k][1]; hi <= b && (b-hi >= c || b == n) {
				owner[j] = k
				continue
			}
		}
		a := max(0, min(lo-min(c, m-(hi-lo)), n-m))
		ranges = append(ranges, [2]int{a, min(a+m, n)})
		owner[j] = len(ranges) - 1
	}
	return ranges, owner
}

// keep is how many wordpieces of a text plan reads (0: all): MaxTokens,
// and in Truncate mode at most a window's. Chunk and Long mode without
// MaxTokens read the whole text (Long mode to say how long a text it
// refuses is).
func (e *Embedder) keep() int {
	n := e.maxTokens
	if w := e.window - 2 - len(e.promptIDs); e.mode == Truncate && (n == 0 || n > w) {
		n = w
	}
	return n
}

// promptNote is ", the prompt's N wordpieces" when there is a prompt.
func (e *Embedder) promptNote() string {
	if len(e.promptIDs) == 0 {
		return ""
	}
	return fmt.Sprintf(" and the prompt's %d wordpieces", len(e.promptIDs))
}

// framed is the one Long pass of a model written by `convert long`: the
// text cut into windows of W−2 wordpieces, each framed as [CLS] … [SEP],
// so that every window is exactly the input a chunk of Chunk mode is, at
// the positions the long model restarts every W tokens. Without the far
// field the long model then reads each window as the original reads that
// chunk; the far field adds what the other windows say.
func (e *Embedder) framed(i int, toks []int64) pass {
	w := e.window - 2 - len(e.promptIDs)
	ids := make([]int64, 0, e.framedLen(len(toks)))
	for lo := 0; lo == 0 || lo < len(toks); lo += w {
		ids = append(ids, e.cls)
		ids = append(ids, e.promptIDs...)
		ids = append(ids, toks[lo:min(lo+w, len(toks))]...)
		ids = append(ids, e.sep)
	}
	return pass{text: i, ids: ids}
}

// framedLate is framed's pass with its windows' wordpieces as the spans
// of Late mode: a model written by `convert long` reads each window at
// the positions a chunk has, and the far field tells it of the others.
func (e *Embedder) framedLate(i int, toks []int64) pass {
	ps := e.framed(i, toks)
	p := len(e.promptIDs)
	w := e.window - 2 - p
	for lo, k := 0, 0; lo == 0 || lo < len(toks); lo, k = lo+w, k+1 {
		from := k*e.window + 1 + p
		ps.spans = append(ps.spans, [2]int{from, from + min(w, len(toks)-lo)})
	}
	return ps
}

// framedLen is the length of framed's pass for n wordpieces.
func (e *Embedder) framedLen(n int) int {
	p := len(e.promptIDs)
	w := e.window - 2 - p
	windows := max(1, (n+w-1)/w)
	return n + (2+p)*windows
}

// longFits is the most wordpieces one Long pass of at most lim tokens
// holds: lim−2, or for a model written by `convert long` W−2 in each of
// its whole windows of W tokens and the rest of a last, partial one.
func (e *Embedder) longFits(lim int) int {
	p := len(e.promptIDs)
	if !e.longModel {
		return max(0, lim-2-p)
	}
	w := e.window
	return lim/w*(w-2-p) + max(0, lim%w-2-p)
}

// longHint says how to read a text longer than longLimit.
func (e *Embedder) longHint() string {
	switch {
	case e.longModel:
		return "it was written by `convert long`: convert the original again with a larger --max-length, or cap the text with MaxTokens (--max-tokens)"
	case e.limit > 0 && e.fixedSeq > 0 && e.fixedSeq < e.limit:
		return "cap the text with MaxTokens (--max-tokens), or read it in chunks (Chunk, --mode chunk)"
	case e.limitKind == convert.LimitTable:
		return "`convert long " + e.path + " -o OUT` makes a model that reads longer inputs, or cap the text with MaxTokens (--max-tokens)"
	case e.limitKind == convert.LimitBuffer:
		return "`convert local-pooled " + e.path + " -o OUT` computes an ALiBi bias in the op, without the buffer, and reads longer inputs; or cap the text with MaxTokens (--max-tokens), or read it in chunks (Chunk, --mode chunk)"
	case e.limitKind == convert.LimitMetadata:
		return "its rotary positions were scaled by `convert extend-positions`: scale the original again with a larger --max-positions, or cap the text with MaxTokens (--max-tokens), or read it in chunks (Chunk, --mode chunk)"
	}
	// A limit the model was trained for (config.json, doc string): a
	// rotary model reads past it once its frequencies are scaled.
	return "cap the text with MaxTokens (--max-tokens), or read it in chunks (Chunk, --mode chunk); a rotary model reads longer inputs after `convert extend-positions " + e.path + " -o OUT --max-positions N`"
}

// longLimitSource says where longLimit comes from.
func (e *Embedder) longLimitSource() string {
	if e.fixedSeq > 0 && (e.limit == 0 || e.fixedSeq < e.limit) {
		return "the sequence length its inputs declare"
	}
	return e.limitSrc
}

// longLimit is the most tokens one Long pass may have: the model's
// limit and any sequence length its inputs declare.
func (e *Embedder) longLimit() int {
	switch {
	case e.limit > 0 && e.fixedSeq > 0:
		return min(e.limit, e.fixedSeq)
	case e.fixedSeq > 0:
		return e.fixedSeq
	}
	return e.limit
}

// maxBatchTokens bounds the tokens of one batched run.
const maxBatchTokens = 4096

// bucket rounds a sequence length up to a multiple of 64 up to 512 tokens
// and of 512 beyond. Padding is masked, so it changes no vector; it keeps
// the shapes onnxruntime sees to a few, whose buffers its memory arena then
// reuses: with every document's own length, a full-attention pass over
// 4K-token documents grew the arena past 24 GB after 56 of them.
func bucket(seq int) int {
	if seq <= 512 {
		return (seq + 63) / 64 * 64
	}
	return (seq + 511) / 512 * 512
}

// runPass runs passes as one batch, padded to the longest (or to the
// declared sequence length), and pools each: their vectors in order, one
// for each pass or, in Late mode, one for each of its spans.
func (e *Embedder) runPass(rows []pass) ([][]float64, error) {
	n := len(rows)
	b := max(n, e.fixedRows)
	seq := 0
	for _, r := range rows {
		seq = max(seq, len(r.ids))
	}
	if e.hasMask {
		// Padding changes no vector, except past the trained length of
		// a model whose dynamic rotary scale follows the padded length.
		b := bucket(seq)
		if lim := e.longLimit(); lim > 0 {
			b = min(b, lim)
		}
		if e.trained > 0 && seq <= e.trained {
			b = min(b, e.trained)
		}
		seq = max(seq, b)
	}
	if e.fixedSeq > 0 {
		if seq > e.fixedSeq {
			return nil, fmt.Errorf("embed: %s takes sequences of %d tokens, got %d", e.path, e.fixedSeq, seq)
		}
		seq = e.fixedSeq
	}
	ids := make([]int64, b*seq)
	mask := make([]int64, b*seq)
	lengths := make([]int, b)
	for i := 0; i < b; i++ {
		r := []int64{e.cls, e.sep} // rows beyond n fill a declared batch
		if i < n {
			r = rows[i].ids
		}
		lengths[i] = len(r)
		for j := 0; j < seq; j++ {
			if j < len(r) {
				ids[i*seq+j] = r[j]
				mask[i*seq+j] = 1
			} else {
				ids[i*seq+j] = e.tok.PadID()
			}
		}
	}
	feed, err := infer.TokenFeed(e.inputs, b, seq, ids, mask)
	if err != nil {
		return nil, fmt.Errorf("embed: %s: %w", e.path, err)
	}
	maps.Copy(feed, e.fixed)
	res, err := e.sess.Run(feed, e.output)
	if err != nil {
		return nil, backendError{fmt.Errorf("embed: %s: %w", e.path, err)}
	}
	t := res[e.output]
	want := fmt.Sprintf("[%d, %d, hidden]", b, seq)
	ok := t != nil && len(t.Shape) == 3 && t.Shape[0] == b && t.Shape[1] == seq && t.Shape[2] > 0
	if e.pooling == PoolOutput {
		want = fmt.Sprintf("[%d, dim]", b)
		ok = t != nil && len(t.Shape) == 2 && t.Shape[0] == b && t.Shape[1] > 0
	}
	if !ok {
		shape := "none"
		if t != nil {
			shape = fmt.Sprint(t.Shape)
		}
		return nil, fmt.Errorf("embed: %s: output %s has shape %s, want %s", e.path, e.output, shape, want)
	}
	dim := t.Shape[len(t.Shape)-1]
	if e.dim > 0 && dim != e.dim {
		return nil, fmt.Errorf("embed: %s: output %s has %d features, declared %d", e.path, e.output, dim, e.dim)
	}
	e.dim = dim
	h, err := t.AsFloat64s()
	if err != nil {
		return nil, fmt.Errorf("embed: %s: output %s: %w", e.path, e.output, err)
	}
	truncate := func(v []float64) []float64 {
		if e.truncDim > 0 && e.truncDim < dim {
			return v[:e.truncDim:e.truncDim]
		}
		return v
	}
	var out [][]float64
	for i, r := range rows {
		var vs [][]float64
		if e.pooling == PoolOutput {
			out = append(out, truncate(h[i*dim:(i+1)*dim]))
			continue
		}
		row := h[i*seq*dim : (i+1)*seq*dim]
		switch {
		case len(r.spans) > 0:
			for _, sp := range r.spans {
				if sp[1] == sp[0] { // an empty text: its pass whole
					vs = append(vs, pool(PoolMean, row, lengths[i], dim))
					continue
				}
				vs = append(vs, pool(PoolMean, row[sp[0]*dim:sp[1]*dim], sp[1]-sp[0], dim))
			}
		default:
			vs = [][]float64{e.poolPass(row, lengths[i], dim)}
		}
		for _, v := range vs {
			out = append(out, truncate(v))
		}
	}
	return out, nil
}

// poolPass pools a pass's n hidden states by the embedder's pooling:
// all of them, or, when the model's Pooling config sets include_prompt
// false, all but the first unpooled tokens ([CLS] and the prompt) of each
// window of the pass (one window, or a `convert long` model's windows of
// Window tokens). At least a window's last token ([SEP]) stays.
func (e *Embedder) poolPass(row []float64, n, dim int) []float64 {
	if e.unpooled == 0 || e.pooling == PoolCLS {
		return pool(e.pooling, row, n, dim)
	}
	w := n
	if e.longModel {
		w = e.window
	}
	out := make([]float64, dim)
	total := 0
	for lo := 0; lo < n; lo += w {
		hi := min(lo+w, n)
		from := lo + min(e.unpooled, hi-lo-1)
		v := pool(e.pooling, row[from*dim:hi*dim], hi-from, dim)
		for k, x := range v {
			switch {
			case e.pooling == PoolMax && total > 0:
				out[k] = max(out[k], x)
			case e.pooling == PoolMax:
				out[k] = x
			default: // PoolMean: the windows' sums, then their mean
				out[k] += x * float64(hi-from)
			}
		}
		total += hi - from
	}
	if e.pooling == PoolMean {
		for k := range out {
			out[k] /= float64(total)
		}
	}
	return out
}

// sentenceOutput returns the first [batch, dim] float output named like
// a sentence vector (sentence_embedding, dense, dense_vecs, …; never
// pooler_output), or "".
func sentenceOutput(outs []infer.Value) string {
	for _, v := range outs {
		n := strings.ToLower(v.Name)
		if len(v.Shape) == 2 && onnx.IsFloat(v.DType) && !strings.Contains(n, "pooler") &&
			(strings.Contains(n, "sentence_embedding") || strings.Contains(n, "dense") || strings.HasSuffix(n, "embedding") || strings.HasSuffix(n, "embeddings")) {
			return v.Name
		}
	}
	return ""
}

// chooseOutput returns the output Options.Output "" reads (see there),
// or "" when none fits.
func chooseOutput(outs []infer.Value) string {
	float := func(v infer.Value, rank int) bool { return len(v.Shape) == rank && onnx.IsFloat(v.DType) }
	for _, v := range outs {
		if n := strings.ToLower(v.Name); float(v, 3) && (strings.Contains(n, "hidden") || strings.Contains(n, "token_embeddings")) {
			return v.Name
		}
	}
	if v := sentenceOutput(outs); v != "" {
		return v
	}
	for _, v := range outs {
		if n := strings.ToLower(v.Name); float(v, 3) && !strings.Contains(n, "colbert") && !strings.Contains(n, "sparse") {
			return v.Name
		}
	}
	return ""
}
