package textfile

import (
	"bufio"
	"fmt"
	"os"
	"strings"
)

// MaxTexts bounds the texts of one file.
const MaxTexts = 1 << 16

// Read reads one text per line from path: a trailing "\r" is dropped and
// blank lines are skipped; a file without texts, or with more than
// MaxTexts or a line over 1 MiB, is an error. Errors name path.
func Read(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	var texts []string
	for sc.Scan() {
		s := strings.TrimRight(sc.Text(), "\r")
		if strings.TrimSpace(s) == "" {
			continue
		}
		if len(texts) == MaxTexts {
			return nil, fmt.Errorf("%s: more than %d texts", path, MaxTexts)
		}
		texts = append(texts, s)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(texts) == 0 {
		return nil, fmt.Errorf("%s: no texts (one per line)", path)
	}
	return texts, nil
}
