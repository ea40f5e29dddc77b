package ingest

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"unicode/utf8"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/array"
	"github.com/apache/arrow/go/v17/arrow/memory"

	"github.com/draftflow/draftflow/topics"
)

// FuzzParseSettings: any bytes as a settings file either fail with an error or give settings that apply to
// every dataset without breaking the documented bounds (max_new_tokens >= 0, temperature >= 0, top_p in
// [0, 1]), whatever the flags' base is.
func FuzzParseSettings(f *testing.F) {
	for _, s := range []string{
		`{"default": {"max_new_tokens": 4096, "temperature": 0.6, "top_p": 0.95}, "datasets": {"glaive": {"lane": "short", "max_new_tokens": 10240}}}`,
		`{"datasets": {"x": {"template_kwargs": {"enable_thinking": true}, "seed": 3, "sampling_seed": 3, "stop_token_ids": [1, 2]}}}`,
		`{"default": {"top_p": 1.5}}`, `{"default": {"temprature": 1}}`, `{}`, `[]`, `null`, `{"datasets": null}`,
		`{"default": {"max_new_tokens": -1}}`, `{"default": {"seed": 1, "sampling_seed": 2}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := ParseSettings(data)
		if err != nil {
			if err.Error() == "" {
				t.Fatal("an error without a message")
			}
			return
		}
		base := topics.Sampling{MaxNewTokens: 128, TopP: 1}
		for _, name := range append(s.datasetNames(), "", "unknown-dataset") {
			got := s.For(name, base)
			if got.MaxNewTokens < 0 || got.TopP < 0 || got.TopP > 1 || got.Temperature != nil && *got.Temperature < 0 {
				t.Fatalf("dataset %q: settings out of bounds: %+v", name, got)
			}
		}
	})
}

// parquetSeed is a small valid dataset file: two conversations.
func parquetSeed(f testing.TB) []byte {
	path := filepath.Join(f.TempDir(), "seed.parquet")
	mem := memory.NewGoAllocator()
	schema := arrow.NewSchema([]arrow.Field{
		{Name: "id", Type: arrow.BinaryTypes.String, Nullable: true},
		{Name: "messages", Type: arrow.ListOf(messageType), Nullable: true},
	}, nil)
	b := array.NewRecordBuilder(mem, schema)
	defer b.Release()
	ids := b.Field(0).(*array.StringBuilder)
	lb := b.Field(1).(*array.ListBuilder)
	sb := lb.ValueBuilder().(*array.StructBuilder)
	for i, conv := range [][][2]string{{{"system", "be brief"}, {"user", "hi"}}, {{"user", "2+2?"}, {"assistant", "4"}, {"user", "and 3+3?"}}} {
		ids.Append([]string{"p0", "p1"}[i])
		lb.Append(true)
		for _, m := range conv {
			sb.Append(true)
			for j := 0; j < sb.NumField(); j++ {
				switch fb := sb.FieldBuilder(j).(type) {
				case *array.StringBuilder:
					switch j {
					case 0:
						fb.Append(m[0])
					case 1:
						fb.Append(m[1])
					default:
						fb.AppendNull()
					}
				default:
					fb.AppendNull()
				}
			}
		}
	}
	rec := b.NewRecord()
	defer rec.Release()
	writeParquet(f, path, rec, 1)
	data, err := os.ReadFile(path)
	if err != nil {
		f.Fatal(err)
	}
	return data
}

// FuzzReadParquet: any bytes as a .parquet input file are read without a panic; the file either fails as a
// whole with an error naming it, or every row reaches the callback as a prompt that holds the parser's
// invariants or as a *LineError with a reason and its row number.
func FuzzReadParquet(f *testing.F) {
	seed := parquetSeed(f)
	f.Add(seed)
	for _, cut := range []int{len(seed) / 2, len(seed) - 9, 4} {
		f.Add(seed[:cut])
	}
	flipped := bytes.Clone(seed)
	flipped[len(flipped)/3] ^= 0x5a
	f.Add(flipped)
	f.Add([]byte("PAR1garbagePAR1"))
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(t.TempDir(), "in.parquet")
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		rows := 0
		err := readFile(context.Background(), path, readOptions{}, func(p topics.Prompt, err error, src topics.Source, raw []byte) error {
			rows++
			if src.Line < 1 {
				t.Fatalf("row number %d", src.Line)
			}
			if err != nil {
				var le *LineError
				if !errors.As(err, &le) || ReasonOf(err) == "" {
					t.Fatalf("row %d: an error without a reason: %v", src.Line, err)
				}
				return nil
			}
			if p.ID == "" || !utf8.ValidString(p.ID) || len(p.Messages) == 0 || p.Messages[len(p.Messages)-1].Role != "user" {
				t.Fatalf("row %d: invalid prompt accepted: %+v", src.Line, p)
			}
			return nil
		})
		if err != nil && !bytes.Contains([]byte(err.Error()), []byte("in.parquet")) {
			t.Fatalf("file error does not name the file: %v", err)
		}
	})
}
