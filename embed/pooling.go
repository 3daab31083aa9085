package embed

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"

	"github.com/linearize/linearize/internal/fsutil"
)

// maxConfigBytes bounds the sentence-transformers JSON files read (real
// ones are a few hundred bytes).
const maxConfigBytes = 1 << 20

// stConfig is what a sentence-transformers model folder says about
// pooling.
type stConfig struct {
	dir       string  // the folder holding modules.json
	pooling   Pooling // "" when no Pooling module is listed
	normalize bool    // a Normalize module is listed
	// excludePrompt: the Pooling module's config.json (poolFile) sets
	// include_prompt false, leaving a prompt's tokens out of the pooling.
	excludePrompt bool
	poolFile      string
	// others are the modules listed besides the Transformer, Pooling and
	// Normalize ones (a Dense projection after the pooling, …), which
	// embed does not apply: "Dense (2_Dense)".
	others []string
}

// stModule is one entry of modules.json.
type stModule struct {
	Idx  int    `json:"idx"`
	Name string `json:"name"`
	Path string `json:"path"`
	Type string `json:"type"`
}

// stPooling is the part of a Pooling module's config.json read here.
type stPooling struct {
	CLS           bool   `json:"pooling_mode_cls_token"`
	Mean          bool   `json:"pooling_mode_mean_tokens"`
	Max           bool   `json:"pooling_mode_max_tokens"`
	MeanSqrtLen   bool   `json:"pooling_mode_mean_sqrt_len_tokens"`
	WeightedMean  bool   `json:"pooling_mode_weightedmean_tokens"`
	LastToken     bool   `json:"pooling_mode_lasttoken"`
	Mode          string `json:"pooling_mode"`
	EmbeddingSize int    `json:"word_embedding_dimension"`
	IncludePrompt *bool  `json:"include_prompt"`
}

// modelDirs are the folders searched for files that belong to the model
// at modelPath, as tokenize.LoadForModel searches them: the model's own
// folder, then the folder named like the model file without its extension.
func modelDirs(modelPath string) []string {
	return []string{filepath.Dir(modelPath), strings.TrimSuffix(modelPath, filepath.Ext(modelPath))}
}

// readSTConfig reads modules.json from the first of the model's folders
// that has one, and the config.json of its Pooling module. It returns nil
// and no error when no folder has a modules.json.
func readSTConfig(modelPath string) (*stConfig, error) {
	for _, dir := range modelDirs(modelPath) {
		p := filepath.Join(dir, "modules.json")
		data, err := readBounded(p)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		var mods []stModule
		if err := json.Unmarshal(data, &mods); err != nil {
			return nil, fmt.Errorf("embed: %s: %w", p, err)
		}
		c := &stConfig{dir: dir}
		for _, m := range mods {
			switch {
			case strings.HasSuffix(m.Type, "Transformer"):
			case strings.HasSuffix(m.Type, "Normalize"):
				c.normalize = true
			case strings.HasSuffix(m.Type, "Pooling"):
				if c.pooling != "" {
					return nil, fmt.Errorf("embed: %s lists more than one Pooling module", p)
				}
				c.poolFile = filepath.Join(dir, filepath.FromSlash(m.Path), "config.json")
				pool, include, err := readPoolingConfig(c.poolFile)
				if err != nil {
					return nil, err
				}
				c.pooling, c.excludePrompt = pool, !include
			default:
				kind := m.Type[strings.LastIndexByte(m.Type, '.')+1:]
				c.others = append(c.others, fmt.Sprintf("%s (%s)", kind, m.Path))
			}
		}
		return c, nil
	}
	return nil, nil
}

// readPoolingConfig reads a sentence-transformers Pooling config.json and
// returns the one pooling it sets, and whether a prompt's tokens are
// pooled (include_prompt, true when absent).
func readPoolingConfig(p string) (Pooling, bool, error) {
	data, err := readBounded(p)
	if err != nil {
		return "", false, err
	}
	var c stPooling
	if err := json.Unmarshal(data, &c); err != nil {
		return "", false, fmt.Errorf("embed: %s: %w", p, err)
	}
	pool, err := c.pooling(p)
	return pool, c.IncludePrompt == nil || *c.IncludePrompt, err
}

// pooling returns the one pooling c sets; p names its file in errors.
func (c stPooling) pooling(p string) (Pooling, error) {
	switch c.Mode { // newer configs may name the mode instead of setting flags
	case "cls":
		c.CLS = true
	case "mean":
		c.Mean = true
	case "max":
		c.Max = true
	case "":
	default:
		return "", fmt.Errorf("embed: %s: pooling_mode %q is not supported (mean, cls or max)", p, c.Mode)
	}
	if c.MeanSqrtLen || c.WeightedMean || c.LastToken {
		return "", fmt.Errorf("embed: %s: a pooling mode other than mean, cls or max is set; choose one of those explicitly", p)
	}
	var set []Pooling
	if c.CLS {
		set = append(set, PoolCLS)
	}
	if c.Mean {
		set = append(set, PoolMean)
	}
	if c.Max {
		set = append(set, PoolMax)
	}
	switch len(set) {
	case 0:
		return "", fmt.Errorf("embed: %s sets no pooling mode", p)
	case 1:
		return set[0], nil
	}
	return "", fmt.Errorf("embed: %s sets %d pooling modes at once (concatenated); choose one explicitly", p, len(set))
}

// readBounded reads a small file, refusing one over maxConfigBytes.
// Errors name the file; a missing file matches os.ErrNotExist.
func readBounded(p string) ([]byte, error) {
	f, err := fsutil.Open(p) // a FIFO without a writer is announced
	if err != nil {
		return nil, fmt.Errorf("embed: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxConfigBytes+1))
	if err != nil {
		return nil, fmt.Errorf("embed: reading %s: %w", p, err)
	}
	if len(data) > maxConfigBytes {
		return nil, fmt.Errorf("embed: %s: larger than %d bytes", p, maxConfigBytes)
	}
	return data, nil
}

// pool reduces one row of hidden states, hidden[j*dim:(j+1)*dim] for the
// first n positions (the real tokens: the rest are padding), to one vector.
func pool(p Pooling, hidden []float64, n, dim int) []float64 {
	v := make([]float64, dim)
	switch p {
	case PoolCLS:
		copy(v, hidden[:dim])
	case PoolMax:
		for k := range v {
			v[k] = math.Inf(-1)
		}
		for j := 0; j < n; j++ {
			row := hidden[j*dim : (j+1)*dim]
			for k, x := range row {
				if x > v[k] {
					v[k] = x
				}
			}
		}
	default: // PoolMean
		for j := 0; j < n; j++ {
			row := hidden[j*dim : (j+1)*dim]
			for k, x := range row {
				v[k] += x
			}
		}
		for k := range v {
			v[k] /= float64(n)
		}
	}
	return v
}
