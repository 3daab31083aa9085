package embed

import "path/filepath"

// ModelPooling resolves p for the model at modelPath as an Embedder does:
// p itself unless it is PoolAuto, else the pooling of the
// sentence-transformers files beside the model (modules.json and its
// Pooling module's config.json), else PoolMean. from says where the choice
// came from: "option", the modules.json path, or "default".
func ModelPooling(modelPath string, p Pooling) (pooling Pooling, from string, err error) {
	if p != PoolAuto {
		return p, "option", nil
	}
	st, err := readSTConfig(modelPath)
	if err != nil {
		return "", "", err
	}
	if st != nil && st.pooling != "" {
		return st.pooling, filepath.Join(st.dir, "modules.json"), nil
	}
	return PoolMean, "default", nil
}
