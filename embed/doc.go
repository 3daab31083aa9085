// Package embed turns texts into vectors with a BERT-style ONNX encoder:
// one vector per text, pooled as the model's sentence-transformers files
// say (mean, [CLS] or max over the last hidden state) and L2-normalised
// for retrieval by cosine.
//
// A long text can be read five ways, so that they can be compared on the
// same text:
//
//   - Truncate: [CLS], the first Window−2 wordpieces, [SEP]; one pass.
//   - Chunk: the wordpieces cut into chunks of Window−2 (consecutive, or
//     overlapping by Overlap), each run as [CLS] chunk [SEP]; the mean of
//     the L2-normalised chunk embeddings weighted by their wordpieces (the
//     usual chunk-and-average workaround, without a short tail weighing
//     as much as a full chunk).
//   - Chunks: the same chunks, one vector each (EmbedChunks), for a
//     document scored by its best chunk (System.MaxSim in Evaluate).
//   - Long: the whole text in one pass, for a model that reads long inputs
//     (written by `convert long`); a model whose position table is too
//     short for the text is an error, never a silent truncation.
//   - Late: late chunking, Chunks mode's chunks with each chunk's vector
//     the mean of its wordpieces' hidden states in a pass over the whole
//     text, so that a chunk is read in the context of its document; a
//     text longer than the model's limit is read in passes that overlap
//     (each chunk pooled from one in which it has context on both sides).
//
// Embedder.ChunkSpans gives the text span of each vector EmbedChunks
// gives (Write puts them in the ids with WriteOptions.ChunkSpans).
//
// A model trained with prompts ("search_query: ", "query: ") reads each
// text after one (Options.Prompt, or PromptName among the prompts of its
// config_sentence_transformers.json, whose default_prompt_name applies
// otherwise): its wordpieces follow [CLS] in every pass of every mode, so
// that each chunk carries it too, and a pass holds the ids
// sentence-transformers tokenizes for prompt+text.
//
// Open loads the model, its tokenizer and its pooling configuration and
// opens an inference session (package infer, onnxruntime or pure Go);
// Embedder.Embed then embeds texts in batches. Cosine compares two
// vectors.
//
// Write embeds a corpus of any size (a corpus.Source, read a document at
// a time) into a folder of parts or one vectors file: it is what
// `convert embed` runs. It batches the documents, refuses or skips
// (WriteOptions.SkipBad) those that cannot be embedded, keeps one shard
// of them (WriteOptions.Shard), and resumes a run that stopped after its
// last finished part, byte for byte; its errors that are the input's
// fault are ErrBadInput.
//
// The pieces it is made of are exported. PartWriter writes the vectors
// as a folder of parts (.npy and ids, or .parquet) with a manifest
// (Manifest), committed part by part. A part's commit is one
// fsutil.WriteSet of its files and its record (part-00000.json, its
// manifest entry; the first part's set also writes manifest.json's
// head): a constant cost, whatever the number of parts before it.
// Finish writes manifest.json whole, listing every part and complete (in
// the same format and bytes as when each commit rewrote it), and removes
// the records; ReadManifest reads a folder being written as
// manifest.json followed by its records. manifest.json is read within 64
// MiB plus 64 KiB a part in the folder (and half the memory), a record
// within 64 MiB. ShardOf splits a corpus by id; VerifyParts checks
// folders (the shards of one run) belong together and Verified.Merge
// joins them. WriteVectors writes a vectors file (.npy with its ids
// file, .jsonl or .parquet) as one transaction, and Assemble writes one
// from the hidden folder of parts in which Write builds it
// (FilePartsDir).
// ParquetWriter and ReadParquet write and read the Parquet layout
// (columns id: string, embedding: list<float32>), deterministically.
package embed
