package shard

import (
	"path"
	"strings"

	"github.com/draftflow/draftflow/topics"
)

// RunInfo identifies a run: the settings that decide which tokens a generation holds. Rows of different runs
// are never written to the same directory.
type RunInfo struct {
	// Model is the model (directory or name) whose tokenizer produced the prompt ids.
	Model string `json:"model"`
	// TokenizerHash fingerprints the tokenizer files and chat template.
	TokenizerHash string `json:"tokenizer_hash"`
	// Sampling is the generation settings, without the scheduling lane.
	Sampling topics.Sampling `json:"sampling"`
	// Fingerprint is the hex SHA-256 of the canonical JSON of the three fields above.
	Fingerprint string `json:"fingerprint"`
}

// RunOf returns the run a generation belongs to: its model, tokenizer and sampling settings (without the lane).
func RunOf(g *topics.Generation) RunInfo {
	s := g.Sampling
	s.Lane = "" // scheduling only: the same settings on another lane are the same run
	return RunInfo{Model: g.Model, TokenizerHash: g.TokenizerHash, Sampling: s,
		Fingerprint: topics.RunFingerprint(g.Model, g.TokenizerHash, s)}
}

// DirName is the run's directory name: a readable slug of the model's last path element and the first 12 hex
// digits of the fingerprint.
func (r RunInfo) DirName() string {
	base := path.Base(strings.TrimRight(strings.ReplaceAll(r.Model, "\\", "/"), "/"))
	if base == "." || base == "/" || base == "" {
		base = "model"
	}
	slug := make([]byte, 0, len(base))
	for i := 0; i < len(base) && len(slug) < 64; i++ {
		c := base[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-', c == '_':
			slug = append(slug, c)
		case c == '.' && len(slug) > 0:
			slug = append(slug, c)
		default:
			slug = append(slug, '_')
		}
	}
	fp := r.Fingerprint
	if len(fp) > 12 {
		fp = fp[:12]
	}
	return string(slug) + "-" + fp
}
