package tokenize

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/linearize/linearize/internal/fsutil"
)

// Companions are the files that travel with a model, relative to the
// folder LoadForModel reads its tokenizer from: the tokenizer itself and
// the Hugging Face and sentence-transformers configuration around it.
var Companions = []string{
	"tokenizer.json",
	"vocab.txt",
	"tokenizer_config.json",
	"special_tokens_map.json",
	"config.json",
	"modules.json",
	"sentence_bert_config.json",
	"config_sentence_transformers.json",
	filepath.Join("1_Pooling", "config.json"),
}

// CompanionDir is the folder LoadForModel reads the tokenizer of the
// model at modelPath from: the model's own folder or the folder named
// like the model without its extension, whichever first holds a
// tokenizer.json or vocab.txt; "" when neither does.
func CompanionDir(modelPath string) string {
	for _, c := range modelDirs(modelPath) {
		if fileIn(c) != "" {
			return c
		}
	}
	return ""
}

// modelDirs are the folders LoadForModel looks in for modelPath.
func modelDirs(modelPath string) []string {
	return []string{filepath.Dir(modelPath), strings.TrimSuffix(modelPath, filepath.Ext(modelPath))}
}

// CopyCompanions copies the companion files (Companions) of the model at
// inModel, from the folder LoadForModel finds its tokenizer in, into the
// folder named like outModel without its extension (out/x.onnx →
// out/x/), where LoadForModel(outModel) finds them. It copies nothing
// when inModel has no tokenizer or outModel already has one. It returns
// the paths written.
//
// The files are written as one set (fsutil.WriteSet): an interruption
// leaves all of them or none. See CompanionSet for what is copied.
func CopyCompanions(inModel, outModel string) (copied []string, err error) {
	files, paths, err := CompanionSet(inModel, outModel)
	if werr := fsutil.WriteSet(files...); werr != nil {
		return nil, fmt.Errorf("tokenize: copying the tokenizer files of %s: %w", inModel, werr)
	}
	return paths, err
}

// CompanionSet returns the companion files CopyCompanions would write,
// as files of a set for fsutil.WriteSet (their folders made), and their
// paths; a command writes them in one set with the model (onnx.SaveWith)
// so that the model and its tokenizer are replaced together.
//
// Only regular files of at most 64 MiB are copied; a symbolic link is
// followed only when it resolves inside the folder it is read from. A
// file that cannot be read does not stop the others: the error lists
// every one, beside the files returned.
func CompanionSet(inModel, outModel string) (files []fsutil.SetFile, paths []string, err error) {
	src := CompanionDir(inModel)
	if src == "" || CompanionDir(outModel) != "" {
		return nil, nil, nil
	}
	ext := filepath.Ext(outModel)
	if ext == "" {
		return nil, nil, fmt.Errorf("tokenize: %s has no extension, so no folder named like it can hold its tokenizer", outModel)
	}
	dst := strings.TrimSuffix(outModel, ext)
	if fi, err := os.Stat(dst); err == nil && !fi.IsDir() {
		return nil, nil, fmt.Errorf("tokenize: %s is a file, not a folder for the tokenizer of %s", dst, outModel)
	}
	root, err := filepath.EvalSymlinks(src)
	if err != nil {
		return nil, nil, fmt.Errorf("tokenize: %w", err)
	}
	var errs []error
	for _, name := range Companions {
		data, err := readCompanion(root, name)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", filepath.Join(src, name), err))
			continue
		}
		to := filepath.Join(dst, name)
		if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
			errs = append(errs, err)
			continue
		}
		files = append(files, fsutil.FileBytes(to, data))
		paths = append(paths, to)
	}
	if len(errs) > 0 {
		return files, paths, fmt.Errorf("tokenize: copying the tokenizer files of %s: %w", inModel, errors.Join(errs...))
	}
	return files, paths, nil
}

// readCompanion reads file name of folder root (symbolic links resolved):
// a regular file, of at most maxFile bytes, that is inside root after
// its links are resolved. A missing file matches fs.ErrNotExist.
func readCompanion(root, name string) ([]byte, error) {
	p := filepath.Join(root, name)
	if _, err := os.Lstat(p); err != nil {
		return nil, err
	}
	real, err := filepath.EvalSymlinks(p)
	if err != nil {
		return nil, fmt.Errorf("a link to nowhere: %w", err)
	}
	if rel, err := filepath.Rel(root, real); err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) || filepath.IsAbs(rel) {
		return nil, fmt.Errorf("a link to %s, outside %s: not copied", real, root)
	}
	data, err := fsutil.ReadRegular(real, maxFile)
	if errors.Is(err, fsutil.ErrRefused) {
		return nil, fmt.Errorf("%w: not copied", err)
	}
	return data, err
}
