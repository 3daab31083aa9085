// Package tokenize implements the BERT WordPiece tokenizer: the text
// normalisation, pre-tokenisation and greedy longest-match-first subword
// split that Hugging Face's BertTokenizer and the tokenizers library apply
// for BERT-style models, so that texts can be fed to a model exported from
// those tools without Python.
//
// A tokenizer is read from a model folder (tokenizer.json, or vocab.txt with
// tokenizer_config.json) by Load, found beside an ONNX model by
// LoadForModel (Find takes either, as a --vocab flag does), or built from
// a vocabulary with New.
// Encode turns one text into ids framed by [CLS] ... [SEP]; EncodeBatch pads
// several texts to a common length and returns the three int64 matrices a
// BERT graph takes: input ids, attention mask and token type ids.
package tokenize
