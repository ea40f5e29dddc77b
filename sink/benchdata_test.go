package sink

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
)

var wordRE = regexp.MustCompile(`[A-Za-z]+|[0-9]+|[^\sA-Za-z0-9]|\s+`)

var (
	textOnce sync.Once
	textToks []uint32
)

// textTokens tokenizes the Go standard library's net/http source into words, numbers, punctuation and
// whitespace runs, and numbers each distinct token by frequency rank (most frequent first, as BPE vocabularies
// roughly are): a stand-in for real text token streams, with their repetition and sequence structure.
func textTokens() []uint32 {
	textOnce.Do(func() {
		var files []string
		filepath.WalkDir(filepath.Join(runtime.GOROOT(), "src", "net", "http"), func(p string, d fs.DirEntry, err error) error {
			if err == nil && !d.IsDir() && strings.HasSuffix(p, ".go") {
				files = append(files, p)
			}
			return nil
		})
		sort.Strings(files)
		var toks []string
		for _, f := range files {
			b, _ := os.ReadFile(f)
			toks = append(toks, wordRE.FindAllString(string(b), -1)...)
		}
		freq := map[string]int{}
		for _, w := range toks {
			freq[w]++
		}
		words := make([]string, 0, len(freq))
		for w := range freq {
			words = append(words, w)
		}
		sort.Slice(words, func(i, j int) bool {
			return freq[words[i]] > freq[words[j]] || freq[words[i]] == freq[words[j]] && words[i] < words[j]
		})
		id := map[string]uint32{}
		for i, w := range words {
			id[w] = uint32(i + 100)
		}
		textToks = make([]uint32, len(toks))
		for i, w := range toks {
			textToks[i] = id[w]
		}
	})
	return textToks
}

// textRows returns n rows cut from textTokens: prompts of 200-2,000 tokens, completions of 100-3,000.
func textRows(n int) []*row {
	toks := textTokens()
	rows := make([]*row, 0, n)
	pos := 0
	for i := 0; i < n; i++ {
		np, no := 200+(i*7919)%1800, 100+(i*104729)%2900
		take := func(k int) []uint32 {
			out := make([]uint32, k)
			for j := range out {
				out[j] = toks[pos%len(toks)]
				pos++
			}
			return out
		}
		rows = append(rows, &row{id: "conv-" + strconv.Itoa(i), dataset: "sharegpt", finishReason: "stop", endpoint: "http://x", prompt: take(np), output: take(no)})
	}
	return rows
}
