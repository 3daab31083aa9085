package tokenize

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// realDir is the unpacked real model (tokenizer files) made by
// scripts/real-model.sh.
var realDir = filepath.Join("..", "testdata", "real", "minilm")

func needReal(t *testing.T) {
	t.Helper()
	if _, err := os.Stat(filepath.Join(realDir, "vocab.txt")); err != nil {
		t.Skipf("real model absent (%v); run scripts/real-model.sh", err)
	}
}

type refCase struct {
	Text   string   `json:"text"`
	IDs    []int64  `json:"ids"`
	Tokens []string `json:"tokens"`
}

func readCases(t *testing.T) []refCase {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "testdata", "realmodel", "tokenizer_cases.json"))
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Cases []refCase `json:"cases"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.Cases) < 50 {
		t.Fatalf("only %d reference cases", len(doc.Cases))
	}
	return doc.Cases
}

// TestReference compares with ids produced by Hugging Face tokenizers
// (testdata/realmodel/tokenizer_cases.py), loading the tokenizer both from
// tokenizer.json and from vocab.txt + tokenizer_config.json.
func TestReference(t *testing.T) {
	needReal(t)
	cases := readCases(t)
	for _, src := range []string{"tokenizer.json", "vocab.txt", ""} {
		tok, err := Load(filepath.Join(realDir, src))
		if err != nil {
			t.Fatal(err)
		}
		agree := 0
		for _, c := range cases {
			got := tok.Encode(c.Text, 0)
			if reflect.DeepEqual(got, c.IDs) {
				agree++
				continue
			}
			var toks []string
			for _, id := range got {
				toks = append(toks, tok.Token(id))
			}
			t.Errorf("%s: %q:\n got %v\nwant %v", src, c.Text, toks, c.Tokens)
		}
		t.Logf("%s: %d/%d texts agree with the reference", src, agree, len(cases))
	}
}

// tinyVocab builds a tokenizer from a hand-written vocabulary, for cases
// whose answer follows from the algorithm's definition.
func tinyVocab(t *testing.T, opt Options) *Tokenizer {
	t.Helper()
	words := "[PAD] [UNK] [CLS] [SEP] [MASK] un ##aff ##able ##ably a ##b b ##c , . ! 中 文 cafe hello world"
	v := map[string]int64{}
	for i, w := range strings.Fields(words) {
		v[w] = int64(i)
	}
	tok, err := New(v, opt)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func TestAlgorithm(t *testing.T) {
	opt := DefaultOptions()
	opt.MaxWordChars = 10
	tok := tinyVocab(t, opt)
	for _, c := range []struct {
		text string
		want string
	}{
		{"unaffable", "un ##aff ##able"},
		{"unaffably!", "un ##aff ##ably !"}, // longest match first: ##ably over ##able
		{"unaffablex", "[UNK]"},             // one unmatched piece: the whole word is unknown
		{"ab abc abd", "a ##b a ##b ##c [UNK]"},
		{"Hello,World.", "hello , world ."},
		{"  CAFÉ\t\n", "cafe"},
		{"中文hello", "中 文 hello"},
		{"unaffablyb", "un ##aff ##ably ##b"}, // 10 chars: allowed
		{"unaffablybb", "[UNK]"},              // 11 chars > MaxWordChars
		{"hello [MASK]!", "hello [MASK] !"},
		{"", ""},
	} {
		got := strings.Join(tok.Tokenize(c.text), " ")
		if got != c.want {
			t.Errorf("Tokenize(%q) = %q, want %q", c.text, got, c.want)
		}
	}
}

func TestCased(t *testing.T) {
	opt := DefaultOptions()
	opt.Lower, opt.StripAccents = false, false
	tok := tinyVocab(t, opt)
	if got := strings.Join(tok.Tokenize("Hello hello"), " "); got != "[UNK] hello" {
		t.Errorf("cased: got %q", got)
	}
}

func TestEncodeBatch(t *testing.T) {
	tok := tinyVocab(t, DefaultOptions())
	cls, sep, pad := int64(2), int64(3), int64(0)
	b, err := tok.EncodeBatch([]string{"hello world", "hello"}, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	hello, world := int64(19), int64(20)
	if b.Size != 2 || b.SeqLen != 4 {
		t.Fatalf("shape %dx%d, want 2x4", b.Size, b.SeqLen)
	}
	wantIDs := []int64{cls, hello, world, sep, cls, hello, sep, pad}
	wantMask := []int64{1, 1, 1, 1, 1, 1, 1, 0}
	if !reflect.DeepEqual(b.InputIDs, wantIDs) || !reflect.DeepEqual(b.AttentionMask, wantMask) ||
		!reflect.DeepEqual(b.TokenTypeIDs, make([]int64, 8)) || !reflect.DeepEqual(b.Lengths, []int{4, 3}) {
		t.Errorf("got %+v", b)
	}
	// Fixed length truncates and pads.
	b, err = tok.EncodeBatch([]string{"hello world hello", "a"}, 3, 0)
	if err != nil {
		t.Fatal(err)
	}
	if want := []int64{cls, hello, sep, cls, 9, sep}; !reflect.DeepEqual(b.InputIDs, want) {
		t.Errorf("seq-len 3: got %v, want %v", b.InputIDs, want)
	}
	if _, err := tok.EncodeBatch(nil, 0, 0); err == nil {
		t.Error("empty batch: no error")
	}
	if _, err := tok.EncodeBatch([]string{"a"}, 1, 0); err == nil {
		t.Error("seq-len 1: no error")
	}
}

func TestBadInput(t *testing.T) {
	if _, err := New(map[string]int64{"a": 0}, DefaultOptions()); err == nil || !strings.Contains(err.Error(), "tokenize:") {
		t.Errorf("missing special tokens: err = %v", err)
	}
	if _, err := Load(filepath.Join(t.TempDir(), "nothing")); err == nil {
		t.Error("missing folder: no error")
	}
	dir := t.TempDir()
	p := filepath.Join(dir, "tokenizer.json")
	os.WriteFile(p, []byte(`{"model":{"type":"WordLevel","vocab":{}}}`), 0o644)
	if _, err := LoadJSON(p); err == nil || !strings.Contains(err.Error(), "WordLevel") {
		t.Errorf("WordLevel model: err = %v", err)
	}
	os.WriteFile(p, []byte(`{"model":`), 0o644)
	if _, err := LoadJSON(p); err == nil {
		t.Error("truncated JSON: no error")
	}
}

// LoadForModel finds the tokenizer in the folder named like the model, or
// says where it looked.
func TestLoadForModel(t *testing.T) {
	dir := t.TempDir()
	model := filepath.Join(dir, "m.onnx")
	if _, err := LoadForModel(model); err == nil || !strings.Contains(err.Error(), filepath.Join(dir, "m")) {
		t.Errorf("no tokenizer: err = %v", err)
	}
	os.Mkdir(filepath.Join(dir, "m"), 0o755)
	os.WriteFile(filepath.Join(dir, "m", "vocab.txt"), []byte("[PAD]\n[UNK]\n[CLS]\n[SEP]\nhi\n"), 0o644)
	tok, err := LoadForModel(model)
	if err != nil {
		t.Fatal(err)
	}
	if got := tok.Encode("hi", 0); !reflect.DeepEqual(got, []int64{2, 4, 3}) {
		t.Errorf("tokenizer beside the model: %v", got)
	}
}

// Find reads --vocab when given, else the tokenizer beside the model, and
// says to pass --vocab when there is none.
func TestFind(t *testing.T) {
	dir := t.TempDir()
	model := filepath.Join(dir, "m.onnx")
	if _, err := Find("", model); err == nil || !strings.Contains(err.Error(), "pass --vocab PATH") || !strings.Contains(err.Error(), filepath.Join(dir, "m")) {
		t.Errorf("no tokenizer: err = %v", err)
	}
	vocab := filepath.Join(dir, "elsewhere", "vocab.txt")
	os.Mkdir(filepath.Dir(vocab), 0o755)
	os.WriteFile(vocab, []byte("[PAD]\n[UNK]\n[CLS]\n[SEP]\nhi\n"), 0o644)
	if _, err := Find(filepath.Join(dir, "nope"), model); err == nil || !strings.Contains(err.Error(), "nope") || strings.Contains(err.Error(), "pass --vocab") {
		t.Errorf("missing --vocab: err = %v", err)
	}
	tok, err := Find(vocab, model)
	if err != nil {
		t.Fatal(err)
	}
	if got := tok.Encode("hi", 0); !reflect.DeepEqual(got, []int64{2, 4, 3}) {
		t.Errorf("--vocab: %v", got)
	}
	os.WriteFile(filepath.Join(dir, "vocab.txt"), []byte("[PAD]\n[UNK]\n[CLS]\n[SEP]\nx\nhi\n"), 0o644)
	if tok, err = Find("", model); err != nil {
		t.Fatal(err)
	}
	if got := tok.Encode("hi", 0); !reflect.DeepEqual(got, []int64{2, 5, 3}) {
		t.Errorf("beside the model: %v", got)
	}
}
