package journal

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/draftflow/draftflow/shard/shardtest"
	"github.com/draftflow/draftflow/topics"
)

// BenchmarkJournal measures what the journal costs each absorbed row: encoding the record's frame, the
// write(2) of every record as it is absorbed, and one fsync per `sync` rows (1: a fsync per row, the most a
// slow stream pays with the default JournalSync of 1 s; 256: a busy stream's second), on the test's temporary
// directory. Rows are text-like: prompts of 200-2,000 tokens, completions of 100-3,000.
func BenchmarkJournal(b *testing.B) {
	for _, sync := range []int{1, 256} {
		b.Run(fmt.Sprintf("sync-every=%d", sync), func(b *testing.B) { benchJournal(b, sync) })
	}
}

func benchJournal(b *testing.B, every int) {
	rows := shardtest.TextRows(256)
	vals := make([][]byte, len(rows))
	var toks int64
	for i, r := range rows {
		v, err := topics.Marshal(&topics.Generation{ID: r.ID, Dataset: r.Dataset, PromptIDs: r.Prompt, OutputIDs: r.Output,
			Meta: topics.GenerationMeta{FinishReason: "stop", Endpoint: r.Endpoint}})
		if err != nil {
			b.Fatal(err)
		}
		vals[i] = v
		toks += int64(r.Tokens())
	}
	dir := b.TempDir()
	j, _, err := Open(dir, func(Key) int64 { return 0 }, slog.New(slog.DiscardHandler))
	if err != nil {
		b.Fatal(err)
	}
	defer j.Close()
	k := Key{"5b0c7d1e9a2f", "generated", 0}
	b.SetBytes(toks / int64(len(rows)) * 4)
	b.ResetTimer()
	var syncs int
	var syncTime time.Duration
	for i := 0; i < b.N; i++ {
		if err := j.Append(k, Record, int64(i), vals[i%len(vals)], rows[i%len(rows)].ID); err != nil {
			b.Fatal(err)
		}
		if (i+1)%every == 0 {
			t0 := time.Now()
			if _, _, err := j.Sync(); err != nil {
				b.Fatal(err)
			}
			syncTime += time.Since(t0)
			syncs++
		}
		if (i+1)%4096 == 0 {
			b.StopTimer()
			j.Retire(k) // as a flush would: the file does not grow without end
			b.StartTimer()
		}
	}
	if syncs > 0 {
		b.ReportMetric(float64(syncTime.Microseconds())/float64(syncs), "µs/fsync")
	}
}

// TestJournalRecovers: what was appended is recovered after a reopen, in offset order and from the recovery
// point on; a torn tail is cut; segments wholly below the recovery point are removed; Pending counts the
// records past the checkpoint without changing anything.
func TestJournalRecovers(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	log := slog.New(slog.DiscardHandler)
	a, b := Key{Log: "5b0c7d1e9a2f", Topic: "generated", Partition: 0}, Key{Topic: "generated", Partition: 1}
	j, rec, err := Open(dir, func(Key) int64 { return 0 }, log)
	if err != nil || len(rec) != 0 {
		t.Fatalf("empty journal: %v %v", rec, err)
	}
	for off := int64(10); off < 15; off++ {
		if err := j.Append(a, Record, off, []byte{byte(off)}, "id"); err != nil {
			t.Fatal(err)
		}
	}
	j.Emitted(a, 12)
	if err := j.Append(a, Skip, 15, nil, ""); err != nil {
		t.Fatal(err)
	}
	if err := j.Append(b, Record, 3, []byte("b"), ""); err != nil {
		t.Fatal(err)
	}
	ids, n, err := j.Sync()
	if err != nil || len(ids) != 5 || n == 0 {
		t.Fatalf("sync: %d ids, %d bytes, %v", len(ids), n, err)
	}
	j.Close()
	// A torn tail on partition a's segment: half a record.
	segs, _ := filepath.Glob(filepath.Join(dir, Dir, "generated+0+*.wal"))
	if len(segs) != 1 {
		t.Fatalf("segments of partition 0: %v", segs)
	}
	f, err := os.OpenFile(segs[0], os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Write(frame(Record, 16, []byte("torn"))[:9])
	f.Close()

	// Partition b is covered by the checkpoint; a up to offset 11.
	cp := Checkpoint{b: {Topic: b.Topic, Partition: b.Partition, Next: 4}, a: {Log: a.Log, Topic: a.Topic, Next: 12}}
	if err := cp.Write(dir); err != nil {
		t.Fatal(err)
	}
	if got, err := ReadCheckpoint(dir); err != nil || got.Next(a) != 12 || got.Next(b) != 4 || got.Next(Key{Topic: "x"}) != 0 {
		t.Fatalf("checkpoint read back: %v %v", got, err)
	}
	if n := Pending(dir); n != 3 {
		t.Fatalf("Pending = %d, want the 3 records at offsets 12-14", n)
	}
	j, rec, err = Open(dir, cp.Next, log)
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	if len(rec) != 1 || rec[0].Key != a {
		t.Fatalf("recovered %+v, want partition a alone", rec)
	}
	r := rec[0]
	var offs []int64
	for _, en := range r.Entries {
		offs = append(offs, en.Offset)
	}
	if !slices.Equal(offs, []int64{12, 13, 14, 15}) || r.Entries[0].Kind != Record || string(r.Entries[0].Value) != "\x0c" ||
		r.Entries[3].Kind != Skip || !r.Emitted[12] || r.Torn != 9 {
		t.Fatalf("recovered entries %v, emitted %v, torn %d", offs, r.Emitted, r.Torn)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, Dir, "generated+1+*.wal")); len(left) != 0 {
		t.Fatalf("partition b's segment below the recovery point kept: %v", left)
	}
	// Appending after the cut tail leaves a readable segment.
	j.Adopt(r)
	if err := j.Append(a, Record, 16, []byte("x"), ""); err != nil {
		t.Fatal(err)
	}
	if _, _, err := j.Sync(); err != nil {
		t.Fatal(err)
	}
	_, entries, valid, size, ok, err := ReadSegment(segs[0])
	if err != nil || !ok || valid != size || entries[len(entries)-1].Offset != 16 {
		t.Fatalf("segment after the append: %d entries, %d of %d bytes valid, %v %v", len(entries), valid, size, ok, err)
	}
	j.Retire(a)
	if left, _ := filepath.Glob(filepath.Join(dir, Dir, "*.wal")); len(left) != 0 {
		t.Fatalf("retired segments left: %v", left)
	}
}
