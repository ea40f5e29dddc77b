package offline

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/draftflow/draftflow/shard"
	"github.com/draftflow/draftflow/shard/shardtest"
)

func TestInspectCatchesCorruption(t *testing.T) {
	t.Parallel()
	// newDir writes 40 rows of two runs in one flush and returns the directory and the first run's directory.
	newDir := func(t *testing.T) (string, string) {
		dir := t.TempDir()
		gens, a, _ := interleaved(0, 40)
		shardtest.Flush(t, dir, 0, gens)
		var out bytes.Buffer
		if _, err := Inspect(context.Background(), dir, &out); err != nil {
			t.Fatalf("clean directory: %v\n%s", err, out.String())
		}
		return dir, filepath.Join(dir, shard.RunOf(a[0]).DirName())
	}
	shards := func(t *testing.T, rd string) []shard.ManifestShard {
		m, err := shard.ReadManifest(rd)
		if err != nil {
			t.Fatal(err)
		}
		return m.Shards
	}
	shardPath := func(t *testing.T, rd string) string { return filepath.Join(rd, shards(t, rd)[0].File) }

	t.Run("flipped byte", func(t *testing.T) {
		dir, rd := newDir(t)
		p := shardPath(t, rd)
		b, _ := os.ReadFile(p)
		b[len(b)/2] ^= 0xFF
		os.WriteFile(p, b, 0o644)
		expectProblem(t, dir, "sha256")
	})
	t.Run("truncated", func(t *testing.T) {
		dir, rd := newDir(t)
		p := shardPath(t, rd)
		b, _ := os.ReadFile(p)
		os.WriteFile(p, b[:len(b)-100], 0o644)
		expectProblem(t, dir, "bytes")
	})
	t.Run("unlisted shard", func(t *testing.T) {
		dir, rd := newDir(t)
		b, _ := os.ReadFile(shardPath(t, rd))
		os.WriteFile(filepath.Join(rd, "generated+0+000000000900-000000000901.parquet"), b, 0o644)
		expectProblem(t, dir, "not in the manifest")
	})
	t.Run("row in two shards", func(t *testing.T) {
		dir := t.TempDir()
		first, a, _ := interleaved(0, 40)
		second, _, _ := interleaved(40, 40)
		shardtest.Flush(t, dir, 0, first)
		shardtest.Flush(t, dir, 40, second)
		rd := filepath.Join(dir, shard.RunOf(a[0]).DirName())
		sh := shards(t, rd)
		if len(sh) < 2 {
			t.Fatalf("%d shards, want two flushes' worth", len(sh))
		}
		// The second shard's bytes replaced by the first's: its rows are the first shard's ids again.
		b, _ := os.ReadFile(filepath.Join(rd, sh[0].File))
		os.WriteFile(filepath.Join(rd, sh[len(sh)-1].File), b, 0o644)
		expectProblem(t, dir, "is also in "+sh[0].File)
	})
	t.Run("missing shard", func(t *testing.T) {
		dir, rd := newDir(t)
		os.Remove(shardPath(t, rd))
		expectProblem(t, dir, "no such file")
	})
	t.Run("rewritten shard", func(t *testing.T) {
		dir, rd := newDir(t)
		// The shard replaced by one of another row: the manifest's counts no longer hold.
		f, err := os.Create(shardPath(t, rd))
		if err != nil {
			t.Fatal(err)
		}
		m, _ := shard.ReadManifest(rd)
		bad := &shard.WriteRow{ID: "bad", Prompt: []uint32{1, 2, 3}, Output: []uint32{4}}
		if _, err := shard.Write(f, m.Run, shard.Origin{Topic: "generated"}, []*shard.WriteRow{bad}, shard.WriteOptions{}); err != nil {
			t.Fatal(err)
		}
		f.Close()
		expectProblem(t, dir, "manifest says")
	})
}

func expectProblem(t *testing.T, dir, want string) {
	t.Helper()
	var out bytes.Buffer
	sum, err := Inspect(context.Background(), dir, &out)
	if err == nil {
		t.Fatalf("Inspect passed a corrupted directory:\n%s", out.String())
	}
	for _, p := range sum.Problems {
		if strings.Contains(p, want) {
			return
		}
	}
	t.Fatalf("no problem mentions %q: %v", want, sum.Problems)
}

// TestToolsStopWhenCancelled: every offline tool returns the context's error once its context is cancelled,
// and writes nothing after it.
func TestToolsStopWhenCancelled(t *testing.T) {
	t.Parallel()
	dir, a, _ := twoRunDir(t)
	run := []string{shard.RunOf(a[0]).DirName()}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var out bytes.Buffer
	if _, err := Inspect(ctx, dir, &out); !errors.Is(err, context.Canceled) || out.Len() != 0 {
		t.Errorf("Inspect: %v, report %q", err, out.String())
	}
	if _, err := Export(ctx, dir, ExportOptions{Format: FormatSpecForge, Runs: run}, &out); !errors.Is(err, context.Canceled) || out.Len() != 0 {
		t.Errorf("Export: %v, wrote %d bytes", err, out.Len())
	}
	if _, err := Vocab(ctx, dir, VocabOptions{Runs: run, DraftVocabSize: 8, TargetVocabSize: 151_000, Limits: Limits{MaxLength: 30}}); !errors.Is(err, context.Canceled) {
		t.Errorf("Vocab from rows: %v", err)
	}
	if _, err := MergeTurns(ctx, dir, t.TempDir(), MergeOptions{Runs: run}); !errors.Is(err, context.Canceled) {
		t.Errorf("MergeTurns: %v", err)
	}
}
