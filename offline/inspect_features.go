package offline

import (
	"os"
	"path/filepath"
	"strings"

	"github.com/draftflow/draftflow/internal/durable"
	"github.com/draftflow/draftflow/shard/features"
)

// maxListedMissing is how many rows without features Inspect lists per run.
const maxListedMissing = 20

// featureCheck checks a run's feature files (stages/capture): a run has them when its directory holds
// features.json or a feature file. Then every shard must have a complete feature file (features.Check: its
// rows are the shard's, by position, id, turn and token count, and every block's CRC holds) listed in
// features.json with its size, checksum and counts, and no feature file may lack its shard.
type featureCheck struct {
	rd      string
	used    bool
	listed  map[string]features.FileEntry
	problem func(string, ...any)
}

func newFeatureCheck(rd string, ents []os.DirEntry, shards map[string]bool, problem func(string, ...any)) *featureCheck {
	fx := &featureCheck{rd: rd, problem: problem, listed: map[string]features.FileEntry{}}
	m, err := features.ReadManifest(rd)
	if err != nil {
		problem("%v", err)
		fx.used = true
	} else if m != nil {
		fx.used = true
		for _, e := range m.Files {
			fx.listed[e.Shard] = e
			if !shards[e.Shard] {
				problem("%s lists features of %s, which is not a shard of the run", features.ManifestName, e.Shard)
			}
		}
	}
	for _, e := range ents {
		name := e.Name()
		if !strings.HasSuffix(name, features.Ext) {
			continue
		}
		fx.used = true
		if shard := strings.TrimSuffix(name, features.Ext) + ".parquet"; !shards[shard] {
			problem("feature file %s has no shard %s in the manifest", name, shard)
		}
	}
	return fx
}

// shard checks the feature file of one shard of rows and adds its counts to sum and rs.
func (fx *featureCheck) shard(file string, rows []features.RowRef, sum *Summary, rs *RunSummary) {
	if !fx.used {
		return
	}
	path := features.PathFor(filepath.Join(fx.rd, file))
	f, err := features.Open(path)
	if err != nil {
		fx.problem("shard %s has no complete feature file: %v", file, err)
		return
	}
	defer f.Close()
	if err := features.Check(f, rows, features.Header{}); err != nil {
		fx.problem("%s does not match its shard: %v", filepath.Base(path), err)
		return
	}
	e, ok := fx.listed[file]
	digest, size, err := durable.FileSHA256(path)
	switch {
	case err != nil:
		fx.problem("%v", err)
	case !ok:
		fx.problem("%s is not listed in %s", filepath.Base(path), features.ManifestName)
	case e.SHA256 != digest || e.Bytes != size || e.Rows != len(f.Index.Rows) || e.Missing != len(f.Index.Missing):
		fx.problem("%s is %d bytes, sha256 %s, %d rows, %d missing; %s says %d, %s, %d, %d", filepath.Base(path), size, digest,
			len(f.Index.Rows), len(f.Index.Missing), features.ManifestName, e.Bytes, e.SHA256, e.Rows, e.Missing)
	}
	sum.FeatureFiles++
	sum.FeatureRows += int64(len(f.Index.Rows))
	for _, r := range f.Index.Rows {
		sum.FeatureTokens += int64(r.Tokens)
	}
	sum.FeatureRowsMissing += int64(len(f.Index.Missing))
	for _, m := range f.Index.Missing {
		if len(rs.Missing) < maxListedMissing {
			rs.Missing = append(rs.Missing, m)
		}
	}
}
