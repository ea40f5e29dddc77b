package tokenize

import (
	"os"

	"github.com/draftflow/draftflow/stages/tokenize/tokenizer/bundled"
)

// BundledModelName names the bundled sample model (package tokenizer/bundled) in records and run directories.
const BundledModelName = "draftflow-sample-bpe"

// LoadModelOrBundled loads the model of dir as LoadModel does, or, when dir is empty, the bundled sample model
// (written to a temporary directory, named BundledModelName). cleanup removes what loading made; call it,
// even after an error, once the model is no longer used.
func LoadModelOrBundled(dir string) (m *Model, cleanup func(), err error) {
	cleanup = func() {}
	if dir != "" {
		m, err = LoadModel(dir)
		return m, cleanup, err
	}
	tmp, err := os.MkdirTemp("", "draftflow-model-")
	if err != nil {
		return nil, cleanup, err
	}
	cleanup = func() { os.RemoveAll(tmp) }
	if err := bundled.WriteDir(tmp); err != nil {
		return nil, cleanup, err
	}
	if m, err = LoadModel(tmp); err != nil {
		return nil, cleanup, err
	}
	m.Name = BundledModelName
	return m, cleanup, nil
}
