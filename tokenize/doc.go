// Package tokenize implements the three tokenizers the encoders linearize
// reads use, as Hugging Face's tokenizers library applies them, so that
// texts can be fed to a model exported from those tools without Python:
//
//   - BERT's WordPiece (BERT, MiniLM, GTE, Nomic, jina-v2): the text
//     normalisation, pre-tokenisation and greedy longest-match-first
//     subword split of BertTokenizer;
//   - GPT-2's byte-level BPE (RoBERTa, ModernBERT): the added tokens
//     matched in the raw text, GPT-2's pre-tokenisation pattern, the bytes
//     written as printable characters and merged pair by pair, the pair of
//     lowest rank first, framed as the post-processor says (<s> … </s>,
//     [CLS] … [SEP]);
//   - SentencePiece Unigram as XLM-RoBERTa's conversion writes it
//     (bge-m3, jina-embeddings-v3, multilingual-e5): SentencePiece's
//     precompiled normaliser applied by character cluster, Metaspace, and
//     the split of highest total score (Viterbi), runs of characters no
//     entry covers becoming one unknown token.
//
// A tokenizer is read from a model folder (tokenizer.json, or vocab.txt with
// tokenizer_config.json) by Load, found beside an ONNX model by
// LoadForModel (Find takes either, as a --vocab flag does), or built from
// a WordPiece vocabulary with New. Forms of tokenizer.json it does not
// implement (a normaliser before BPE, byte fallback, other pre-tokenizers
// and templates) are refused by name rather than tokenized otherwise.
// Encode turns one text into ids framed by [CLS] ... [SEP]; EncodeBatch pads
// several texts to a common length and returns the three int64 matrices a
// BERT graph takes: input ids, attention mask and token type ids.
package tokenize
