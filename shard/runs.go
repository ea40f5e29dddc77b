package shard

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
)

// SelectRuns resolves run names under dir (a sink output directory, or one run directory) to run directories.
// A name matches a run directory's name exactly, or is a prefix of its name or of its fingerprint that no other
// run shares. With no names, dir must hold exactly one run; otherwise the error lists the runs. Runs of
// different models or tokenizers are never selected together: their token ids do not mean the same thing.
func SelectRuns(dir string, names []string) ([]string, error) {
	all, err := RunDirs(dir)
	if err != nil {
		return nil, err
	}
	if len(all) == 0 {
		return nil, fmt.Errorf("no run (no %s) under %s", ManifestName, dir)
	}
	infos := make([]*Manifest, len(all))
	for i, rd := range all {
		if infos[i], err = ReadManifest(rd); err != nil {
			return nil, err
		}
	}
	if len(names) == 0 {
		if len(all) == 1 {
			return all, nil
		}
		return nil, fmt.Errorf("%s holds %d runs; choose one with --run NAME:\n%s", dir, len(all), listRuns(all, infos))
	}
	var out []string
	var chosen []*Manifest
	taken := map[string]bool{}
	for _, name := range names {
		var hits []int
		for i, rd := range all {
			base := filepath.Base(rd)
			if base == name {
				hits = []int{i}
				break
			}
			if strings.HasPrefix(base, name) || strings.HasPrefix(infos[i].Run.Fingerprint, name) {
				hits = append(hits, i)
			}
		}
		switch {
		case len(hits) == 0:
			return nil, fmt.Errorf("no run %q under %s; the runs are:\n%s", name, dir, listRuns(all, infos))
		case len(hits) > 1:
			return nil, fmt.Errorf("run %q is ambiguous under %s; the runs are:\n%s", name, dir, listRuns(all, infos))
		}
		if taken[all[hits[0]]] {
			continue
		}
		taken[all[hits[0]]] = true
		out = append(out, all[hits[0]])
		chosen = append(chosen, infos[hits[0]])
	}
	for _, m := range chosen[1:] {
		if m.Run.Model != chosen[0].Run.Model || m.Run.TokenizerHash != chosen[0].Run.TokenizerHash {
			return nil, errors.New("refusing to mix runs of different models or tokenizers:\n" + listRuns(out, chosen))
		}
	}
	return out, nil
}

func listRuns(dirs []string, ms []*Manifest) string {
	var b strings.Builder
	for i, rd := range dirs {
		fmt.Fprintf(&b, "  %s  model %s  tokenizer %s  %d rows\n", filepath.Base(rd), ms[i].Run.Model, ms[i].Run.TokenizerHash, ms[i].Totals.Rows)
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// ScanRows calls fn for every row of every run under dir (a run directory or an output directory), shard by
// shard in manifest order, reading the columns that describe a row but not its tokens: id, turn, dataset,
// finish_reason, endpoint, stop_reason, prompt_len and completion_len. The row is only valid during the call.
// It stops, with ctx's error, once ctx ends.
func ScanRows(ctx context.Context, dir string, fn func(*Row) error) error {
	runs, err := RunDirs(dir)
	if err != nil {
		return err
	}
	cols := []Col{ColID, ColPromptLen, ColCompletionLen, ColFinishReason, ColDataset, ColTurn, ColEndpoint, ColStopReason}
	for _, rd := range runs {
		m, err := ReadManifest(rd)
		if err != nil {
			return err
		}
		for _, sh := range m.Shards {
			sf, err := Open(filepath.Join(rd, sh.File))
			if err != nil {
				return err
			}
			err = sf.Scan(ctx, cols, fn)
			sf.Close()
			if err != nil {
				return fmt.Errorf("%s: %w", sh.File, err)
			}
		}
	}
	return nil
}

// ScanFile opens the shard at path and calls fn for every row in file order, reading the given columns (nil:
// all) as File.Scan does.
func ScanFile(ctx context.Context, path string, cols []Col, fn func(*Row) error) error {
	sf, err := Open(path)
	if err != nil {
		return err
	}
	defer sf.Close()
	return sf.Scan(ctx, cols, fn)
}
