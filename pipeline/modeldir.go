package pipeline

import (
	"github.com/draftflow/draftflow/shard"
	"github.com/draftflow/draftflow/stages/tokenize"
)

// RunModelDir finds the model directory a run was made with, from its manifest (what Run records in
// shard.Manifest.ModelPath): the bundled sample model (written to a temporary directory that cleanup removes),
// the path `run --model DIR` recorded, else the model name itself, for a run whose writer recorded no path (a
// directory name given to tokenize). Call cleanup, even after an error, once the directory is no longer used.
func RunModelDir(m *shard.Manifest) (dir string, cleanup func(), err error) {
	switch {
	case m.ModelPath == shard.BundledModelPath:
		return bundledFor(m, true)
	case m.ModelPath != "":
		return m.ModelPath, func() {}, nil
	case m.Run.Model == tokenize.BundledModelName:
		// Runs written before manifests recorded the path: the bundled model, when its tokenizer matches.
		return bundledFor(m, false)
	}
	return m.Run.Model, func() {}, nil
}

// bundledFor writes the bundled model for a run that names it; unless sure, its tokenizer hash must match.
func bundledFor(m *shard.Manifest, sure bool) (string, func(), error) {
	bm, cleanup, err := tokenize.LoadModelOrBundled("")
	if err != nil {
		return "", cleanup, err
	}
	if !sure && bm.Hash != m.Run.TokenizerHash {
		return m.Run.Model, cleanup, nil
	}
	return bm.Dir, cleanup, nil
}
