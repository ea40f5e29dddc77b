package sink

import (
	"maps"
	"path/filepath"
	"slices"
	"testing"

	"github.com/draftflow/draftflow/kafka/kafkatest"
	"github.com/draftflow/draftflow/shard"
	"github.com/draftflow/draftflow/shard/shardtest"
	"github.com/draftflow/draftflow/topics"
)

// keptGen is generation i made a row brought in with its output: origin o, turn turn.
func keptGen(i, turn int, o string) *topics.Generation {
	g := shardtest.Generation(i, 0.7)
	g.Turn, g.Origin, g.Meta.Endpoint = turn, o, ""
	return g
}

// Rows brought in with their output are written like generated ones, with their origin; each is reported
// durable under its own account key (a conversation that brought several rows is accounted for row by row),
// a copy of one already in the shards as a duplicate under that key, and a record of an unknown origin is
// dead-lettered naming its turn and origin.
func TestSinkKeptRows(t *testing.T) {
	kc := kafkatest.Config(t, 2)
	dir := t.TempDir()
	gens := []*topics.Generation{
		shardtest.Generation(0, 0.7),
		keptGen(1, 0, topics.OriginResult),
		keptGen(2, 0, topics.OriginRecord),
		keptGen(2, 1, topics.OriginRecord),
		keptGen(3, 0, topics.OriginDataset),
		keptGen(3, 1, topics.OriginDataset),
		keptGen(3, 2, topics.OriginDataset),
	}
	for _, g := range gens[1:] {
		g.ID = "kept-" + g.Origin // one conversation per origin, of one or more rows
	}
	bad := keptGen(4, 5, "imported")
	produceGens(t, kc, append(slices.Clone(gens), bad))
	keys := make([]string, len(gens))
	for i, g := range gens {
		keys[i] = topics.AccountKey(g.ID, g.Turn, g.Origin)
	}
	if k := slices.Compact(slices.Sorted(slices.Values(keys))); len(k) != len(gens) {
		t.Fatalf("account keys %q are not one per row", keys)
	}
	cfg := baseConfig(t, kc, dir)
	sr := startSink(t, cfg)
	sr.waitFor(t, "every row durable under its account key", allDurable(keys))
	rej := collectRejections(t, kc, 1)
	if err := sr.stop(t); err != nil {
		t.Fatal(err)
	}
	if r := rej[0]; r.ID != bad.ID || r.Turn != 5 || r.Origin != "imported" || r.Class != "invalid" {
		t.Errorf("rejection of an unknown origin: %+v", r)
	}

	runs := shardtest.ReadRows(t, dir)
	if len(runs) != 1 {
		t.Fatalf("%d runs, want 1", len(runs))
	}
	for rd, rows := range runs {
		got := map[string]string{}
		for _, r := range rows {
			got[topics.AccountKey(r.ID, int(r.Turn), r.Origin)] = r.Origin
		}
		for i, g := range gens {
			if o := got[keys[i]]; o != topics.OriginOf(g.Origin) {
				t.Errorf("row %s turn %d: origin %q, want %q", g.ID, g.Turn, o, topics.OriginOf(g.Origin))
			}
		}
		m, err := shard.ReadManifest(filepath.Join(dir, rd))
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]int64{topics.OriginGenerated: 1, topics.OriginResult: 1, topics.OriginRecord: 2, topics.OriginDataset: 3}
		if !maps.Equal(m.Origins, want) {
			t.Errorf("manifest origins %v, want %v", m.Origins, want)
		}
	}
	if _, err := inspect(dir, nil); err != nil {
		t.Fatal(err)
	}

	// The same kept row again: a duplicate, reported under its account key.
	produceGens(t, kc, []*topics.Generation{gens[5]})
	sr = startSink(t, cfg)
	sr.waitFor(t, "the copy dropped", func(_, dups map[string]int) bool { return dups[keys[5]] == 1 })
	if err := sr.stop(t); err != nil {
		t.Fatal(err)
	}
}
