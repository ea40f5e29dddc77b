// Package plan works a capture of EAGLE-3 features out before it runs: which decoder layers the aux server
// captures (named, or SGLang's default from the target model's layer count in its config.json), and what the
// feature files will take (bf16 values of the aux layers and the final state per token, at the compression
// measured on a directory's feature files so far).
package plan

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/draftflow/draftflow/shard"
	"github.com/draftflow/draftflow/shard/features"
	capturestage "github.com/draftflow/draftflow/stages/capture"
)

// Model is what a capture needs of the target model: its decoder layers and hidden size, 0 where unknown.
type Model struct {
	Layers int // config.json's num_hidden_layers
	Hidden int // config.json's hidden_size
}

// ReadModel reads the target model's shape from dir/config.json (its text_config for multimodal models). An
// empty dir, or one without a config.json, is the zero Model; a config.json that cannot be read or parsed is an
// error.
func ReadModel(dir string) (Model, error) {
	if dir == "" {
		return Model{}, nil
	}
	path := filepath.Join(dir, "config.json")
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return Model{}, nil
	}
	if err != nil {
		return Model{}, err
	}
	type shape struct {
		Layers int `json:"num_hidden_layers"`
		Hidden int `json:"hidden_size"`
	}
	var c struct {
		shape
		Text *shape `json:"text_config"`
	}
	if err := json.Unmarshal(b, &c); err != nil {
		return Model{}, fmt.Errorf("%s: %w", path, err)
	}
	m := Model(c.shape)
	if c.Text != nil {
		m.Layers = cmp.Or(m.Layers, c.Text.Layers)
		m.Hidden = cmp.Or(m.Hidden, c.Text.Hidden)
	}
	return m, nil
}

// MinLayers is the fewest decoder layers SGLang's default EAGLE-3 capture (2, L/2, L-3) works with.
const MinLayers = 7

// AuxLayers returns the layers the aux server captures: layers when given, else SGLang's default for a model of
// numLayers decoder layers (capturestage.DefaultAuxLayers). numLayers is 0 when neither a flag nor the model
// said; the error then says how to name them.
func AuxLayers(layers []int, numLayers int) ([]int, error) {
	if len(layers) > 0 {
		return layers, nil
	}
	if numLayers == 0 {
		return nil, errors.New("capture: name the aux layers (--aux-layers 2,18,33) or the model's layer count (--num-layers, or --model DIR with a config.json)")
	}
	if numLayers < MinLayers {
		return nil, fmt.Errorf("capture: a model of %d layers: SGLang's default EAGLE-3 capture (2, L/2, L-3) needs at least %d (docs/hidden-states.md); name them with --aux-layers", numLayers, MinLayers)
	}
	return capturestage.DefaultAuxLayers(numLayers), nil
}

// PendingTokens counts the tokens of the shards under dir that have no feature file yet: none when dir does not
// exist yet; a run directory whose manifest cannot be read counts none.
func PendingTokens(dir string) (int64, error) {
	runs, err := shard.RunDirs(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	var n int64
	for _, rd := range runs {
		m, err := shard.ReadManifest(rd)
		if err != nil {
			continue
		}
		for _, sh := range m.Shards {
			if _, err := os.Stat(features.PathFor(filepath.Join(rd, sh.File))); err != nil {
				n += sh.Tokens
			}
		}
	}
	return n, nil
}

// measured returns the stored/raw ratio of the first run directory under dir with feature files, and their
// hidden size; 0, 0 when there are none.
func measured(dir string) (ratio float64, hidden int) {
	runs, _ := shard.RunDirs(dir) // no runs: nothing measured
	for _, rd := range runs {
		m, err := features.ReadManifest(rd)
		if err != nil || m == nil {
			continue
		}
		var raw, stored float64
		for _, f := range m.Files {
			raw += float64(f.Tokens) * float64(m.Header.Width()) * 2
			stored += float64(f.Bytes)
		}
		if m.Header.Hidden > 0 {
			return stored / max(raw, 1), m.Header.Hidden
		}
	}
	return 0, 0
}

// Estimate is what a capture will write.
type Estimate struct {
	// AuxLayers is how many aux layers are captured (the final state comes on top).
	AuxLayers int
	// Hidden is the target model's hidden size (0: unknown; the hidden size of the feature files already in the
	// directory is used then).
	Hidden int
	// Tokens is how many tokens will get features, and TokensWhat what they are ("tokens in the shards without
	// a feature file").
	Tokens     int64
	TokensWhat string
	// Dir is the sink's output directory, where the compression of earlier feature files is measured.
	Dir string
}

// assumedRatio is the compression assumed before a directory's files measure it: zstd on bf16 values of N(0,1)
// at Kimi-K2's width (docs/hidden-states.md).
const assumedRatio = 0.70

// Write says what the capture will write: bytes per token (bf16, aux layers + final) and, with Tokens, in all.
func (e Estimate) Write(w io.Writer) error {
	ratio, seen := measured(e.Dir)
	hidden := e.Hidden
	if hidden == 0 {
		hidden = seen
	}
	if hidden == 0 {
		_, err := fmt.Fprintf(w, "capture: %d aux layers + the final state per token, 2 bytes a value (bf16) x the hidden size (not known before the first answer; at Kimi-K2's 7168: %s a token raw)\n",
			e.AuxLayers, HumanBytes(float64((e.AuxLayers+1)*7168*2)))
		return err
	}
	raw := float64((e.AuxLayers + 1) * hidden * 2)
	ratioText := fmt.Sprintf("compression not yet measured here (~%.2f on N(0,1) values at Kimi width, docs/hidden-states.md)", assumedRatio)
	est := raw * assumedRatio
	if ratio > 0 {
		ratioText = fmt.Sprintf("compression %.2f measured on this directory's feature files", ratio)
		est = raw * ratio
	}
	if _, err := fmt.Fprintf(w, "capture: %s a token raw ((%d aux + final) x hidden %d x 2 bytes), %s\n", HumanBytes(raw), e.AuxLayers, hidden, ratioText); err != nil {
		return err
	}
	if e.Tokens > 0 {
		_, err := fmt.Fprintf(w, "capture: %d %s -> about %s raw, %s stored\n", e.Tokens, e.TokensWhat, HumanBytes(raw*float64(e.Tokens)), HumanBytes(est*float64(e.Tokens)))
		return err
	}
	return nil
}

// HumanBytes writes n bytes in decimal units: "512 B", "3.2 MB".
func HumanBytes(n float64) string {
	units := []string{"B", "KB", "MB", "GB", "TB", "PB"}
	i := 0
	for n >= 1000 && i < len(units)-1 {
		n /= 1000
		i++
	}
	if i == 0 {
		return fmt.Sprintf("%.0f B", n)
	}
	return fmt.Sprintf("%.1f %s", n, units[i])
}
