package ingest

import (
	"os"
	"strings"
	"testing"

	"github.com/draftflow/draftflow/topics"
)

// BenchmarkParseSample parses every line of the bundled sample; b.SetBytes makes the result a throughput.
func BenchmarkParseSample(b *testing.B) {
	data, err := os.ReadFile(samplePath)
	if err != nil {
		b.Fatal(err)
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		for i, l := range lines {
			_, _ = Parse("s.jsonl", int64(i+1), []byte(l), "s")
		}
	}
}

// BenchmarkReadFileSample streams the bundled sample file through ReadFile.
func BenchmarkReadFileSample(b *testing.B) {
	st, err := os.Stat(samplePath)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(st.Size())
	for b.Loop() {
		n := 0
		err := ReadFile(samplePath, func(p topics.Prompt, err error, src topics.Source, raw []byte) error {
			n++
			return nil
		})
		if err != nil || n == 0 {
			b.Fatal(err)
		}
	}
}
