package shard

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/draftflow/draftflow/topics"
)

// ManifestName is the file name of a run's manifest.
const ManifestName = "manifest.json"

// BundledModelPath is Manifest.ModelPath for runs made with draftflow's bundled sample model.
const BundledModelPath = "bundled:draftflow-sample-bpe"

// Manifest lists the committed shards of one run. It is rewritten atomically after every flush, so a reader
// that follows it never sees a partial or uncommitted shard.
type Manifest struct {
	// FormatVersion of the shards and of this file.
	FormatVersion int `json:"format_version"`
	// Run is the run's identity: model, tokenizer hash, sampling settings, fingerprint.
	Run RunInfo `json:"run"`
	// Schema documents the shard columns.
	Schema []Column `json:"schema"`
	// Shards in the order they were written.
	Shards []ManifestShard `json:"shards"`
	// Totals over Shards.
	Totals Totals `json:"totals"`
	// Origins counts the rows of Shards by origin (topics.Origins): how many were generated and how many
	// brought in with their output. A shard listed without its own counts (written before they existed)
	// counts as generated.
	Origins map[string]int64 `json:"origins,omitempty"`
	// ModelPath says where the model of Run.Model is, for commands that need its files later (vocab reads
	// its config.json): the absolute directory `run --model DIR` was given, or BundledModelPath; empty when
	// the writer did not know (a sink process of its own).
	ModelPath string `json:"model_path,omitempty"`
	// Merged marks a run whose conversations' turns were merged into one row each (`draftflow merge-turns`,
	// package offline): a row may hold a whole conversation, its prompt (before prompt_len) including earlier
	// turns' outputs, marked 1 in loss_mask.
	Merged bool `json:"merged,omitempty"`
}

// ManifestShard describes one shard.
type ManifestShard struct {
	// File is the shard's file name in the run directory.
	File string `json:"file"`
	// Rows, Tokens (prompt + completion), PromptTokens and CompletionTokens count its contents.
	Rows             int64 `json:"rows"`
	Tokens           int64 `json:"tokens"`
	PromptTokens     int64 `json:"prompt_tokens"`
	CompletionTokens int64 `json:"completion_tokens"`
	// Bytes is the file size and SHA256 its hex checksum.
	Bytes  int64  `json:"bytes"`
	SHA256 string `json:"sha256"`
	// Topic, Partition, FirstOffset and LastOffset locate the flush that wrote it.
	Topic       string `json:"topic"`
	Partition   int    `json:"partition"`
	FirstOffset int64  `json:"first_offset"`
	LastOffset  int64  `json:"last_offset"`
	// Log is the short topic ID of the topic incarnation the offsets belong to ("" if the broker reports none).
	Log string `json:"log,omitempty"`
	// Origins counts the shard's rows by origin (topics.Origins); absent in manifests written before it
	// existed, whose shards hold generated rows only.
	Origins map[string]int64 `json:"origins,omitempty"`
}

// OriginCounts returns the shard's rows by origin: Origins, or every row generated when it is absent.
func (s ManifestShard) OriginCounts() map[string]int64 {
	if s.Origins != nil {
		return s.Origins
	}
	if s.Rows == 0 {
		return map[string]int64{}
	}
	return map[string]int64{topics.OriginGenerated: s.Rows}
}

// Totals sums a run's shards.
type Totals struct {
	Shards           int   `json:"shards"`
	Rows             int64 `json:"rows"`
	Tokens           int64 `json:"tokens"`
	PromptTokens     int64 `json:"prompt_tokens"`
	CompletionTokens int64 `json:"completion_tokens"`
	Bytes            int64 `json:"bytes"`
}

// Add counts one more shard.
func (t *Totals) Add(s ManifestShard) {
	t.Shards++
	t.Rows += s.Rows
	t.Tokens += s.Tokens
	t.PromptTokens += s.PromptTokens
	t.CompletionTokens += s.CompletionTokens
	t.Bytes += s.Bytes
}

// recompute sets Totals and Origins from Shards.
func (m *Manifest) recompute() {
	m.Totals = Totals{}
	m.Origins = map[string]int64{}
	for _, s := range m.Shards {
		m.Totals.Add(s)
		for o, n := range s.OriginCounts() {
			m.Origins[o] += n
		}
	}
}

// ReadManifest reads the manifest of a run directory.
func ReadManifest(runDir string) (*Manifest, error) {
	b, err := os.ReadFile(filepath.Join(runDir, ManifestName))
	if err != nil {
		return nil, err
	}
	var m Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(runDir, ManifestName), err)
	}
	if m.FormatVersion != FormatVersion {
		return nil, fmt.Errorf("%s: format version %d, this build reads %d", filepath.Join(runDir, ManifestName), m.FormatVersion, FormatVersion)
	}
	return &m, nil
}

// WriteManifest sets m's totals from its shards and replaces runDir's manifest with it, atomically
// (WriteJSONAtomic): a reader sees the old manifest or the new one.
func WriteManifest(runDir string, m *Manifest) error {
	m.recompute()
	return WriteJSONAtomic(filepath.Join(runDir, ManifestName), m)
}

// RunDirs returns the run directories of dir: dir itself if it holds a manifest, else its subdirectories that
// do, sorted by name.
func RunDirs(dir string) ([]string, error) {
	if _, err := os.Stat(filepath.Join(dir, ManifestName)); err == nil {
		return []string{dir}, nil
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range ents {
		if !e.IsDir() {
			continue
		}
		p := filepath.Join(dir, e.Name())
		if _, err := os.Stat(filepath.Join(p, ManifestName)); err == nil {
			out = append(out, p)
		} else if !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
	}
	return out, nil
}
