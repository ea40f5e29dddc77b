package shard_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"syscall"
	"testing"

	"github.com/klauspost/compress/zstd"

	"github.com/draftflow/draftflow/shard"
	"github.com/draftflow/draftflow/shard/shardtest"
)

// benchRows returns rows shaped like regenerated chat data: prompts of 200-2,000 tokens sharing a chat-template
// prefix, completions of 100-3,000 tokens, token ids Zipf-distributed over a 151k vocabulary as in natural text.
func benchRows(n int) []*shard.WriteRow {
	r := rand.New(rand.NewPCG(1, 2))
	z := rand.NewZipf(r, 1.07, 2, 151_000)
	prefix := make([]uint32, 40) // a system prompt every row shares
	for i := range prefix {
		prefix[i] = uint32(z.Uint64())
	}
	rows := make([]*shard.WriteRow, n)
	for i := range rows {
		p := append([]uint32(nil), prefix...)
		for j := 200 + r.IntN(1800); j > 0; j-- {
			p = append(p, uint32(z.Uint64()))
		}
		o := make([]uint32, 100+r.IntN(2900))
		for j := range o {
			o[j] = uint32(z.Uint64())
		}
		fr := "stop"
		if i%7 == 0 {
			fr = "length"
		}
		rows[i] = &shard.WriteRow{ID: "conv-" + strconv.Itoa(i), Dataset: "sharegpt", FinishReason: fr, Endpoint: "http://10.0.0.1:30000",
			Prompt: p, Output: o}
	}
	return rows
}

func rowTokens(rows []*shard.WriteRow) int64 {
	var n int64
	for _, r := range rows {
		n += int64(r.Tokens())
	}
	return n
}

type countWriter struct{ n int64 }

func (c *countWriter) Write(p []byte) (int, error) { c.n += int64(len(p)); return len(p), nil }

// writeJSONLZstd writes rows as the equivalent JSON lines (same fields as a shard) through zstd.
func writeJSONLZstd(w io.Writer, rows []*shard.WriteRow) error {
	zw, err := zstd.NewWriter(w)
	if err != nil {
		return err
	}
	var buf []byte
	for _, r := range rows {
		buf = buf[:0]
		buf = append(buf, `{"id":`...)
		id, _ := json.Marshal(r.ID)
		buf = append(buf, id...)
		buf = append(buf, `,"input_ids":[`...)
		for i, v := range r.Prompt {
			if i > 0 {
				buf = append(buf, ',')
			}
			buf = strconv.AppendUint(buf, uint64(v), 10)
		}
		for _, v := range r.Output {
			buf = append(buf, ',')
			buf = strconv.AppendUint(buf, uint64(v), 10)
		}
		buf = append(buf, `],"loss_mask":[`...)
		for i := 0; i < r.Tokens(); i++ {
			if i > 0 {
				buf = append(buf, ',')
			}
			if i < len(r.Prompt) {
				buf = append(buf, '0')
			} else {
				buf = append(buf, '1')
			}
		}
		tail, _ := json.Marshal(map[string]any{"prompt_len": len(r.Prompt), "completion_len": len(r.Output),
			"finish_reason": r.FinishReason, "dataset": r.Dataset, "turn": r.Turn, "endpoint": r.Endpoint})
		buf = append(buf, "],"...)
		buf = append(buf, tail[1:]...)
		buf = append(buf, '\n')
		if _, err := zw.Write(buf); err != nil {
			return err
		}
	}
	return zw.Close()
}

// benchSets are the benchmark inputs: "text" is Go standard library source tokenized by word frequency rank
// (sequence structure like real text), "zipf" is independent Zipf-distributed ids (no structure: the worst case).
var benchSets = []struct {
	name string
	rows func(int) []*shard.WriteRow
}{{"text", shardtest.TextRows}, {"zipf", benchRows}}

// cpuSeconds returns the process's user+system CPU time, so throughput per core is measured even on a busy
// machine where wall time is shared with other processes.
func cpuSeconds() float64 {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}

func runEncodeBench(b *testing.B, encode func(io.Writer, []*shard.WriteRow) error) {
	for _, set := range benchSets {
		b.Run(set.name, func(b *testing.B) {
			rows := set.rows(256)
			toks := rowTokens(rows)
			runtime.GC() // keep the setup's garbage out of the measurement
			var size int64
			b.SetBytes(toks * 4)
			b.ResetTimer()
			cpu0 := cpuSeconds()
			for i := 0; i < b.N; i++ {
				var cw countWriter
				if err := encode(&cw, rows); err != nil {
					b.Fatal(err)
				}
				size = cw.n
			}
			cpu := cpuSeconds() - cpu0
			b.ReportMetric(float64(toks)*float64(b.N)/b.Elapsed().Seconds(), "tokens/s")
			b.ReportMetric(float64(toks)*float64(b.N)/cpu, "tokens/cpu-s")
			b.ReportMetric(float64(size)/float64(toks), "bytes/token")
		})
	}
}

// benchZstdLevels are the shard zstd levels the benchmark compares (0 is the sink's default, zstd level 3; klauspost's
// encoder maps 1, 3, 7 and 11 onto its four speeds: fastest, default, better, best).
var benchZstdLevels = []int{1, 0, 7, 11}

// BenchmarkShardEncode measures the sink's Parquet encoding (schema, zstd, row groups) at each level of
// benchZstdLevels: tokens per wall second, tokens per CPU second (the per-core figure) and bytes per token. Run it
// with -cpu 1.
func BenchmarkShardEncode(b *testing.B) {
	for _, level := range benchZstdLevels {
		name := "zstd" + strconv.Itoa(level)
		if level == 0 {
			name = "default"
		}
		b.Run(name, func(b *testing.B) {
			runEncodeBench(b, func(w io.Writer, rows []*shard.WriteRow) error {
				_, err := shard.Write(w, shard.RunInfo{Model: "m", Fingerprint: "f"}, shard.Origin{Topic: "generated"}, rows, shard.WriteOptions{ZstdLevel: level})
				return err
			})
		})
	}
}

// BenchmarkTokenBounds reports, per data set, two floors no shard encoding of these rows can go below with the
// encodings Parquet readers know: "entropy" is the order-0 empirical entropy of the token ids in bytes per token
// (the floor for independent ids, as in the zipf set), and "bss_zstd" the bytes per token of the ids split into
// byte planes per 1 MiB page (Parquet's BYTE_STREAM_SPLIT, which arrow-go v17 cannot write for int32) under zstd's
// best level, the strongest standard page encoding for unsorted integers.
func BenchmarkTokenBounds(b *testing.B) {
	for _, set := range benchSets {
		b.Run(set.name, func(b *testing.B) {
			rows := set.rows(256)
			var ids []uint32
			for _, r := range rows {
				ids = append(append(ids, r.Prompt...), r.Output...)
			}
			enc, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedBestCompression), zstd.WithEncoderConcurrency(1))
			if err != nil {
				b.Fatal(err)
			}
			var h float64
			for i := 0; i < b.N; i++ {
				h = entropyBytes(ids)
			}
			const pageIDs = 1 << 18 // 1 MiB of int32 values, arrow's default data page size
			var size int
			plane := make([]byte, 4*pageIDs)
			for start := 0; start < len(ids); start += pageIDs {
				page := ids[start:min(start+pageIDs, len(ids))]
				n := len(page)
				for i, v := range page {
					plane[i], plane[n+i], plane[2*n+i], plane[3*n+i] = byte(v), byte(v>>8), byte(v>>16), byte(v>>24)
				}
				size += len(enc.EncodeAll(plane[:4*n], nil))
			}
			b.ReportMetric(h, "entropy-bytes/token")
			b.ReportMetric(float64(size)/float64(len(ids)), "bss_zstd-bytes/token")
		})
	}
}

// entropyBytes is the order-0 empirical entropy of ids, in bytes per id.
func entropyBytes(ids []uint32) float64 {
	counts := map[uint32]int{}
	for _, v := range ids {
		counts[v]++
	}
	var bits float64
	n := float64(len(ids))
	for _, c := range counts {
		p := float64(c) / n
		bits -= p * math.Log2(p)
	}
	return bits / 8
}

// BenchmarkJSONLZstd encodes the same rows as zstd-compressed JSON lines, for comparison with BenchmarkShardEncode.
func BenchmarkJSONLZstd(b *testing.B) { runEncodeBench(b, writeJSONLZstd) }

// TestShardVsJSONLZstd guards storage: on text-like token streams a shard must not be larger than the same
// rows as zstd-compressed JSON lines (both at zstd's default level). 60% of the JSON lines is not reachable
// with Parquet's int32 encodings (BenchmarkTokenBounds; docs/performance.md); this test keeps the shards
// from regressing past parity and logs both ratios.
func TestShardVsJSONLZstd(t *testing.T) {
	t.Parallel()
	for _, set := range benchSets {
		rows := set.rows(64)
		var pq, js bytes.Buffer
		if _, err := shard.Write(&pq, shard.RunInfo{}, shard.Origin{Topic: "generated"}, rows, shard.WriteOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := writeJSONLZstd(&js, rows); err != nil {
			t.Fatal(err)
		}
		ratio := float64(pq.Len()) / float64(js.Len())
		t.Logf("%s: shard %d bytes, JSONL+zstd %d bytes (%.1f%%), %d tokens", set.name, pq.Len(), js.Len(), 100*ratio, rowTokens(rows))
		if set.name == "text" && ratio > 1.0 {
			t.Errorf("%s: shard is %.1f%% of JSONL+zstd", set.name, 100*ratio)
		}
	}
}

// TestZstdLevels checks that Config.ZstdLevel reaches the shard: every level reads back token-exact, and higher
// levels write fewer bytes on text-like ids.
func TestZstdLevels(t *testing.T) {
	t.Parallel()
	rows := shardtest.TextRows(32)
	prev := int64(-1)
	for _, level := range []int{11, 7, 0, 1} { // increasing size
		path := filepath.Join(t.TempDir(), "s.parquet")
		f, err := os.Create(path)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := shard.Write(f, shard.RunInfo{}, shard.Origin{Topic: "generated"}, rows, shard.WriteOptions{ZstdLevel: level}); err != nil {
			t.Fatal(err)
		}
		f.Close()
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		size := fi.Size()
		if size <= prev {
			t.Errorf("level %d: %d bytes, not more than the higher level's %d", level, size, prev)
		}
		prev = size
		sf, err := shard.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		i := 0
		err = sf.Scan(context.Background(), nil, func(r *shard.Row) error {
			want := append(append([]uint32(nil), rows[i].Prompt...), rows[i].Output...)
			if r.ID != rows[i].ID || len(r.InputIDs) != len(want) {
				return fmt.Errorf("row %d: id %q with %d ids, want %q with %d", i, r.ID, len(r.InputIDs), rows[i].ID, len(want))
			}
			for j, v := range r.InputIDs {
				if uint32(v) != want[j] {
					return fmt.Errorf("row %d: input_ids[%d] = %d, want %d", i, j, v, want[j])
				}
			}
			i++
			return nil
		})
		sf.Close()
		if err == nil && i != len(rows) {
			err = fmt.Errorf("read %d rows, wrote %d", i, len(rows))
		}
		if err != nil {
			t.Errorf("level %d: %v", level, err)
		}
	}
}

// BenchmarkTokenCounting measures what keeping the generated-token counts adds to a flush of the rows
// the sink's BenchmarkFlush writes: counting the flush's output ids, merging them into the run's counts and
// rewriting token_counts.bin (temporary file and rename) for a run that has already seen 150,000 distinct ids,
// the worst case of a full vocabulary. Compare its tokens/cpu-s with BenchmarkFlush's (docs/performance.md).
func BenchmarkTokenCounting(b *testing.B) {
	for _, n := range []int{256, shard.DefaultShardRows} { // a slow stream's small flushes, and the default
		b.Run(fmt.Sprintf("rows=%d", n), func(b *testing.B) { benchTokenCounting(b, n) })
	}
}

func benchTokenCounting(b *testing.B, n int) {
	rows := shardtest.TextRows(n)
	toks := rowTokens(rows)
	dir := b.TempDir()
	m := &shard.Manifest{Shards: []shard.ManifestShard{{File: "x.parquet"}}}
	run := &shard.Counts{}
	for id := int32(0); id < 150_000; id++ {
		run.Add(id, int64(1+id%97))
	}
	b.ResetTimer()
	cpu0 := cpuSeconds()
	for i := 0; i < b.N; i++ {
		flush := &shard.Counts{}
		flush.AddOutputs(rows)
		run.AddCounts(flush)
		if err := shard.WriteCounts(dir, m, run); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(toks)*float64(b.N)/b.Elapsed().Seconds(), "tokens/s")
	b.ReportMetric(float64(toks)*float64(b.N)/(cpuSeconds()-cpu0), "tokens/cpu-s")
}
