package offline

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"maps"
	"path/filepath"
	"strings"
	"testing"

	"github.com/draftflow/draftflow/shard"
	"github.com/draftflow/draftflow/shard/shardtest"
	"github.com/draftflow/draftflow/topics"
)

// keptDir writes one run of generated rows and rows brought in with their output, and returns the directory,
// the run directory and the generations.
func keptDir(t *testing.T) (string, string, []*topics.Generation) {
	t.Helper()
	var gens []*topics.Generation
	origins := []string{"", topics.OriginResult, topics.OriginRecord, topics.OriginDataset}
	for i := range 12 {
		g := shardtest.Generation(i, 0.7)
		g.Origin = origins[i%4]
		gens = append(gens, g)
	}
	dir := t.TempDir()
	shardtest.Flush(t, dir, 0, gens)
	return dir, filepath.Join(dir, shard.RunOf(gens[0]).DirName()), gens
}

// Inspect counts rows by origin, per run and in total, says so in its report, and finds a manifest whose counts
// are not the shards'.
func TestInspectCountsOrigins(t *testing.T) {
	t.Parallel()
	dir, rd, _ := keptDir(t)
	var out bytes.Buffer
	sum, err := Inspect(context.Background(), dir, &out)
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	want := map[string]int64{topics.OriginGenerated: 3, topics.OriginResult: 3, topics.OriginRecord: 3, topics.OriginDataset: 3}
	if !maps.Equal(sum.Origins, want) || !maps.Equal(sum.Runs[0].Origins, want) {
		t.Errorf("origins %v (run %v), want %v", sum.Origins, sum.Runs[0].Origins, want)
	}
	if !strings.Contains(out.String(), "rows by origin: generated=3 result=3 record=3 dataset=3") {
		t.Errorf("report does not count rows by origin:\n%s", out.String())
	}

	m, err := shard.ReadManifest(rd)
	if err != nil {
		t.Fatal(err)
	}
	m.Shards[0].Origins = map[string]int64{topics.OriginGenerated: m.Shards[0].Rows}
	if err := shard.WriteManifest(rd, m); err != nil {
		t.Fatal(err)
	}
	expectProblem(t, dir, "rows by origin")
}

// Exports and the vocabulary take rows brought in as they take generated ones; the speculators rows name the
// origin.
func TestExportAndVocabOfKeptRows(t *testing.T) {
	t.Parallel()
	dir, _, gens := keptDir(t)
	var buf bytes.Buffer
	if _, err := Export(context.Background(), dir, ExportOptions{Format: FormatSpeculators}, &buf); err != nil {
		t.Fatal(err)
	}
	byID := map[string]*topics.Generation{}
	for _, g := range gens {
		byID[g.ID] = g
	}
	sc := bufio.NewScanner(&buf)
	sc.Buffer(nil, 1<<20)
	n := 0
	for sc.Scan() {
		var row struct {
			PrimaryID string   `json:"primary_id"`
			LossMask  []uint8  `json:"loss_mask"`
			InputIDs  []uint32 `json:"input_ids"`
			Metadata  struct {
				Origin string `json:"origin"`
			} `json:"metadata"`
		}
		if err := json.Unmarshal(sc.Bytes(), &row); err != nil {
			t.Fatal(err)
		}
		g := byID[row.PrimaryID]
		if g == nil || row.Metadata.Origin != topics.OriginOf(g.Origin) || len(row.InputIDs) != len(g.PromptIDs)+len(g.OutputIDs) {
			t.Errorf("exported row %s: origin %q, %d ids", row.PrimaryID, row.Metadata.Origin, len(row.InputIDs))
		}
		n++
	}
	if n != len(gens) {
		t.Errorf("%d rows exported, want %d", n, len(gens))
	}
	v, err := Vocab(context.Background(), dir, VocabOptions{DraftVocabSize: 8, TargetVocabSize: 151_000})
	if err != nil {
		t.Fatal(err)
	}
	var outputs int64
	for _, g := range gens {
		outputs += int64(len(g.OutputIDs))
	}
	if v.Info.GeneratedTokens != outputs {
		t.Errorf("the vocabulary counted %d output tokens, the rows hold %d", v.Info.GeneratedTokens, outputs)
	}
}
