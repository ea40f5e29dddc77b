package sink

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/draftflow/draftflow/shard"
	"github.com/draftflow/draftflow/shard/shardtest"
	"github.com/draftflow/draftflow/sink/journal"
	"github.com/draftflow/draftflow/topics"
)

// flushGens commits gens (offsets first, first+1, ...) of partition 0 of topic "generated", as Run would after
// a restart: offsets below the recovered next offset and (id, turn) already written are skipped.
func flushGens(st *store, first int64, gens []*mixedGen) error {
	pk := partKey{"generated", 0}
	next := st.next(pk)
	var groups []runRows
	idx := map[*runState]int{}
	lo, hi := int64(-1), int64(-1)
	for i, mg := range gens {
		off := first + int64(i)
		if off < next {
			continue
		}
		if lo < 0 {
			lo = off
		}
		hi = off
		rs := st.run(shard.RunOf(mg.g))
		if dup, _, err := rs.written(rowKey{mg.g.ID, int32(mg.g.Turn)}); err != nil {
			return err
		} else if dup {
			continue
		}
		j, ok := idx[rs]
		if !ok {
			j = len(groups)
			idx[rs] = j
			groups = append(groups, runRows{run: rs})
		}
		groups[j].rows = append(groups[j].rows, &shard.WriteRow{ID: mg.g.ID, Dataset: mg.g.Dataset, FinishReason: mg.g.Meta.FinishReason,
			Endpoint: mg.g.Meta.Endpoint, Prompt: mg.g.PromptIDs, Output: mg.g.OutputIDs})
	}
	if lo < 0 {
		return nil
	}
	_, err := st.commitFlush(pk, lo, hi, groups, 4)
	return err
}

type mixedGen struct{ g *topics.Generation }

// interleaved returns n generations alternating between two runs (temperature 0.5 and 1.0), ids from base.
func interleaved(base, n int) ([]*mixedGen, []*topics.Generation, []*topics.Generation) {
	var all []*mixedGen
	var a, b []*topics.Generation
	for i := base; i < base+n; i++ {
		temp := 0.5
		if i%2 == 1 {
			temp = 1.0
		}
		g := shardtest.Generation(i, temp)
		all = append(all, &mixedGen{g})
		if temp == 0.5 {
			a = append(a, g)
		} else {
			b = append(b, g)
		}
	}
	return all, a, b
}

func TestRecoveryAtEveryCrashPoint(t *testing.T) {
	t.Parallel()
	steps := []string{"shard-written", "shards-synced", "checkpoint-written", "shard-renamed", "manifest-written", "counts-written", "index-written"}
	for _, step := range steps {
		t.Run(step, func(t *testing.T) {
			dir := t.TempDir()
			ctx := context.Background()
			st, err := openStore(ctx, dir, quietLogger())
			if err != nil {
				t.Fatal(err)
			}
			first, a1, b1 := interleaved(0, 10)
			if err := flushGens(st, 0, first); err != nil {
				t.Fatal(err)
			}
			second, a2, b2 := interleaved(10, 10)
			st.crashAt = func(s string) bool { return s == step }
			err = flushGens(st, 10, second)
			st.crashAt = nil
			if err != errCrashed {
				t.Fatalf("flush returned %v, want the simulated crash", err)
			}

			// Restart.
			st.close()
			st2, err := openStore(ctx, dir, quietLogger())
			if err != nil {
				t.Fatal(err)
			}
			committed := step != "shard-written" && step != "shards-synced"
			wantNext := int64(10)
			if committed {
				wantNext = 20
			}
			if got := st2.next(partKey{"generated", 0}); got != wantNext {
				t.Fatalf("recovered next offset %d, want %d", got, wantNext)
			}
			assertNoTemps(t, dir)
			// The redelivered second flush: skipped where committed, written otherwise.
			if err := flushGens(st2, 10, second); err != nil {
				t.Fatal(err)
			}
			rows := shardtest.ReadRows(t, dir)
			if len(rows) != 2 {
				t.Fatalf("%d run dirs, want 2", len(rows))
			}
			ra, rb := st2.run(shard.RunOf(a1[0])), st2.run(shard.RunOf(b1[0]))
			checkRowsExact(t, rows[filepath.Base(ra.dir)], append(a1, a2...))
			checkRowsExact(t, rows[filepath.Base(rb.dir)], append(b1, b2...))
			checkTokenCounts(t, dir)
			checkIndexes(t, st2, 10)
			st2.close()
			if _, err := inspect(dir, nil); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func assertNoTemps(t *testing.T, dir string) {
	t.Helper()
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && shard.IsTemp(d.Name()) {
			t.Errorf("temporary file left: %s", p)
		}
		return nil
	})
}

func TestTornTempFilesCleaned(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ctx := context.Background()
	st, err := openStore(ctx, dir, quietLogger())
	if err != nil {
		t.Fatal(err)
	}
	gens, a, _ := interleaved(0, 6)
	if err := flushGens(st, 0, gens); err != nil {
		t.Fatal(err)
	}
	rd := st.run(shard.RunOf(a[0])).dir
	torn := []string{
		filepath.Join(rd, shard.TempPrefix+"generated+0+000000000006-000000000011.parquet"),
		filepath.Join(rd, shard.TempPrefix+shard.ManifestName),
		filepath.Join(dir, shard.TempPrefix+journal.CheckpointName),
	}
	for _, p := range torn {
		if err := os.WriteFile(p, []byte("PAR1 torn"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	st.close()
	st2, err := openStore(ctx, dir, quietLogger())
	if err != nil {
		t.Fatal(err)
	}
	st2.close()
	assertNoTemps(t, dir)
	if _, err := inspect(dir, nil); err != nil {
		t.Fatal(err)
	}
}

func TestRecoverWithoutCheckpointUsesShardNames(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ctx := context.Background()
	st, err := openStore(ctx, dir, quietLogger())
	if err != nil {
		t.Fatal(err)
	}
	gens, _, _ := interleaved(0, 8)
	if err := flushGens(st, 100, gens); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, journal.CheckpointName)); err != nil {
		t.Fatal(err)
	}
	st.close()
	st2, err := openStore(ctx, dir, quietLogger())
	if err != nil {
		t.Fatal(err)
	}
	if got := st2.next(partKey{"generated", 0}); got != 108 {
		t.Fatalf("next offset %d, want 108 (from shard names)", got)
	}
	if n := len(st2.runs); n != 2 {
		t.Fatalf("%d runs recovered, want 2", n)
	}
	for _, rs := range st2.runs {
		if n := indexedKeys(t, rs); n != 4 {
			t.Fatalf("run %s: %d ids indexed, want 4", rs.dir, n)
		}
	}
}

// TestTokenCountsRecovered: a run's token counts that are missing, lag behind the manifest or name a shard it
// no longer lists are recounted from the rows on start, and readers count past them meanwhile.
func TestTokenCountsRecovered(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, damage := range []string{"missing", "lagging", "foreign", "torn"} {
		t.Run(damage, func(t *testing.T) {
			dir := t.TempDir()
			st, err := openStore(ctx, dir, quietLogger())
			if err != nil {
				t.Fatal(err)
			}
			gens, a, _ := interleaved(0, 20)
			if err := flushGens(st, 0, gens[:10]); err != nil {
				t.Fatal(err)
			}
			rd := st.run(shard.RunOf(a[0])).dir
			saved, _ := os.ReadFile(filepath.Join(rd, shard.TokenCountsFile))
			if err := flushGens(st, 10, gens[10:]); err != nil {
				t.Fatal(err)
			}
			p := filepath.Join(rd, shard.TokenCountsFile)
			switch damage {
			case "missing":
				os.Remove(p)
			case "lagging":
				os.WriteFile(p, saved, 0o644)
			case "foreign":
				os.WriteFile(p, bytes.Replace(saved, []byte(`"last_shard":"`), []byte(`"last_shard":"x`), 1), 0o644)
			case "torn":
				os.WriteFile(p, saved[:len(saved)-3], 0o644)
			}
			checkTokenCounts(t, dir) // readers count past the damage
			st.close()
			st2, err := openStore(ctx, dir, quietLogger())
			if err != nil {
				t.Fatal(err)
			}
			st2.close()
			m, _ := shard.ReadManifest(rd)
			if _, stale, err := shard.LoadCounts(ctx, rd, m); err != nil || stale {
				t.Fatalf("after recovery the counts are stale (%v) or unreadable (%v)", stale, err)
			}
			checkTokenCounts(t, dir)
		})
	}
}

// indexedKeys counts the keys in a run's id index.
func indexedKeys(t *testing.T, rs *runState) int {
	t.Helper()
	n := 0
	err := rs.index.db.View(func(tx *bolt.Tx) error {
		n = tx.Bucket(indexKeys).Stats().KeyN
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// checkIndexes checks that the id index of every run of st holds the keys of its manifest's rows, wantRows
// in each run, and covers the whole manifest.
func checkIndexes(t *testing.T, st *store, wantRows int) {
	t.Helper()
	for _, rs := range st.runs {
		if n := indexedKeys(t, rs); n != wantRows || int64(n) != rs.manifest.Totals.Rows {
			t.Fatalf("run %s: %d ids indexed, want %d (manifest: %d rows)", rs.dir, n, wantRows, rs.manifest.Totals.Rows)
		}
		var c idCover
		rs.index.db.View(func(tx *bolt.Tx) error { return json.Unmarshal(tx.Bucket(indexMeta).Get(indexCover), &c) })
		if c != coverOf(&rs.manifest, len(rs.manifest.Shards)) {
			t.Fatalf("run %s: index covers %+v, manifest has %d shards", rs.dir, c, len(rs.manifest.Shards))
		}
		sf, err := shard.Open(filepath.Join(rs.dir, rs.manifest.Shards[0].File))
		if err != nil {
			t.Fatal(err)
		}
		sf.Scan(context.Background(), []shard.Col{shard.ColID, shard.ColTurn}, func(r *shard.Row) error {
			if ok, _, err := rs.written(rowKey{r.ID, r.Turn}); !ok || err != nil {
				t.Fatalf("run %s: row %s/%d not in the index (%v)", rs.dir, r.ID, r.Turn, err)
			}
			return nil
		})
		sf.Close()
	}
}

// TestIDIndexRecovered: an id index that is missing, lags behind the manifest (a crash between the manifest
// and the index update), is corrupt, torn or covers shards the manifest does not list is brought up to the
// manifest on start, and the redelivered records are still found to be duplicates.
func TestIDIndexRecovered(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, damage := range []string{"missing", "lagging", "garbage", "torn", "page-overwritten", "foreign", "empty",
		"half-added", "adding-unlisted"} {
		t.Run(damage, func(t *testing.T) {
			dir := t.TempDir()
			st, err := openStore(ctx, dir, quietLogger())
			if err != nil {
				t.Fatal(err)
			}
			gens, a, b := interleaved(0, 20)
			if err := flushGens(st, 0, gens[:10]); err != nil {
				t.Fatal(err)
			}
			rs := st.run(shard.RunOf(a[0]))
			p := filepath.Join(rs.dir, IDIndexFile)
			saved, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			if err := flushGens(st, 10, gens[10:]); err != nil {
				t.Fatal(err)
			}
			st.close()
			cur, _ := os.ReadFile(p)
			switch damage {
			case "missing":
				os.Remove(p)
			case "lagging":
				os.WriteFile(p, saved, 0o644)
			case "garbage":
				os.WriteFile(p, bytes.Repeat([]byte("not a bbolt file "), 1000), 0o644)
			case "torn":
				os.WriteFile(p, cur[:len(cur)/2], 0o644)
			case "page-overwritten":
				// Past the two meta pages: the key pages are overwritten, the metadata still checks out.
				for i := 2 * 4096; i < len(cur); i++ {
					cur[i] = 0xA5
				}
				os.WriteFile(p, cur, 0o644)
			case "foreign":
				// An index of another directory's shards: the cover it records is not this manifest's.
				m, _ := shard.ReadManifest(rs.dir)
				m.Shards[len(m.Shards)-1].File = "generated+0+000000000900-000000000901.parquet"
				db, err := openBolt(p)
				if err != nil {
					t.Fatal(err)
				}
				cb, _ := json.Marshal(coverOf(m, len(m.Shards)))
				db.Update(func(tx *bolt.Tx) error { return tx.Bucket(indexMeta).Put(indexCover, cb) })
				db.Close()
			case "empty":
				os.WriteFile(p, nil, 0o644)
			case "half-added", "adding-unlisted":
				// A crash between the chunks of one add: the index covers the first shard and holds some
				// keys of the one being added (the manifest's next, or, after outside damage, none it lists).
				os.WriteFile(p, saved, 0o644)
				m, _ := shard.ReadManifest(rs.dir)
				adding := m.Shards[1].File
				if damage == "adding-unlisted" {
					adding = "generated+0+000000000900-000000000901.parquet"
				}
				db, err := openBolt(p)
				if err != nil {
					t.Fatal(err)
				}
				db.Update(func(tx *bolt.Tx) error {
					tx.Bucket(indexKeys).Put(indexKey(rowKey{a[len(a)-1].ID, 0}), []byte{valueEnded})
					if damage == "adding-unlisted" {
						tx.Bucket(indexKeys).Put(indexKey(rowKey{"not-in-any-shard", 0}), []byte{valueEnded})
					}
					return tx.Bucket(indexMeta).Put(indexAdding, []byte(adding))
				})
				db.Close()
			}
			st2, err := openStore(ctx, dir, quietLogger())
			if err != nil {
				t.Fatal(err)
			}
			defer st2.close()
			checkIndexes(t, st2, 10)
			// Every record redelivered from offset 0, as after a reset of the group's offsets: all are
			// duplicates of rows in the shards.
			st2.cp = journal.Checkpoint{}
			if err := flushGens(st2, 0, gens); err != nil {
				t.Fatal(err)
			}
			rows := shardtest.ReadRows(t, dir)
			checkRowsExact(t, rows[filepath.Base(rs.dir)], a)
			checkRowsExact(t, rows[filepath.Base(st2.run(shard.RunOf(b[0])).dir)], b)
		})
	}
}

// TestIDIndexAddsInChunks: a flush larger than indexChunk goes in several transactions, and only the last
// records the cover and clears the shard being added.
func TestIDIndexAddsInChunks(t *testing.T) {
	t.Parallel()
	m := &shard.Manifest{Shards: []shard.ManifestShard{{File: "a.parquet", Rows: 2*indexChunk + 5}}}
	x, err := openIndex(context.Background(), t.TempDir(), &shard.Manifest{}, quietLogger())
	if err != nil {
		t.Fatal(err)
	}
	defer x.close()
	keys := make([]indexEntry, m.Shards[0].Rows)
	for i := range keys {
		keys[i] = indexEntry{rowKey{fmt.Sprintf("id-%d", i), int32(i % 3)}, []byte{valueEnded}}
	}
	if err := x.add(keys, coverOf(m, 1)); err != nil {
		t.Fatal(err)
	}
	x.db.View(func(tx *bolt.Tx) error {
		var c idCover
		json.Unmarshal(tx.Bucket(indexMeta).Get(indexCover), &c)
		if n := tx.Bucket(indexKeys).Stats().KeyN; n != len(keys) || c != coverOf(m, 1) || tx.Bucket(indexMeta).Get(indexAdding) != nil {
			t.Fatalf("%d keys, cover %+v, adding %q", n, c, tx.Bucket(indexMeta).Get(indexAdding))
		}
		return nil
	})
	if x.db.NoSync {
		t.Fatal("NoSync left on")
	}
}

// The process's configuration is written once into each run directory a shard goes to, named by its hash; a
// restart with the same configuration finds it there and writes nothing, another configuration adds its own.
func TestStoreRecordsConfig(t *testing.T) {
	dir := t.TempDir()
	run := filepath.Join(dir, "model-0123456789ab")
	if err := os.MkdirAll(run, 0o755); err != nil {
		t.Fatal(err)
	}
	record := func(config string) {
		t.Helper()
		st, err := openStore(context.Background(), dir, quietLogger())
		if err != nil {
			t.Fatal(err)
		}
		st.jobConfig = []byte(config)
		for range 2 {
			if err := st.recordConfig(run); err != nil {
				t.Fatal(err)
			}
		}
	}
	record("a: 1\n")
	record("a: 1\n")
	files, err := shard.ConfigFiles(run)
	if err != nil || len(files) != 1 || filepath.Base(files[0]) != shard.ConfigFile([]byte("a: 1\n")) {
		t.Fatalf("records %v (%v), want one", files, err)
	}
	if b, _ := os.ReadFile(files[0]); string(b) != "a: 1\n" {
		t.Errorf("record holds %q", b)
	}
	record("a: 2\n")
	if files, _ := shard.ConfigFiles(run); len(files) != 2 {
		t.Errorf("records %v after another configuration, want two", files)
	}
	record("")
	if files, _ := shard.ConfigFiles(run); len(files) != 2 {
		t.Errorf("records %v after a process without a configuration, want two", files)
	}
}
