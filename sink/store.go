package sink

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"

	"github.com/draftflow/draftflow/internal/durable"
	"github.com/draftflow/draftflow/shard"
	"github.com/draftflow/draftflow/sink/journal"
	"github.com/draftflow/draftflow/topics"
)

type partKey struct {
	topic     string
	partition int
}

type rowKey struct {
	id   string
	turn int32
}

// runState is one run directory the sink writes.
type runState struct {
	info     shard.RunInfo
	dir      string
	manifest shard.Manifest
	index    *idIndex            // the keys of the committed shards (IDIndexFile); nil until the run has a directory
	buffered map[rowKey]struct{} // buffered, not yet durable: bounded by the sink's buffer
	counts   *shard.Counts       // generated-token counts of the committed shards (TokenCountsFile)
}

// written reports whether k is in a committed shard of the run.
func (rs *runState) written(k rowKey) (bool, winner, error) { return rs.index.get(k) }

// store owns Config.Dir: the checkpoint, the run directories and their manifests.
type store struct {
	dir       string
	log       *slog.Logger
	cp        journal.Checkpoint
	logs      map[string]string    // physical topic -> short ID of the incarnation being consumed
	zstd      int                  // zstd level of new shards (0: default)
	modelPath string               // Config.ModelPath
	jobConfig []byte               // Config.JobConfig
	recorded  map[string]bool      // run directories holding jobConfig
	runs      map[string]*runState // by fingerprint

	// crashAt, when set, is asked at each named step of commitFlush; true makes commitFlush stop right
	// there, leaving the directory exactly as a crash at that instant would. Only the package's crash
	// tests set it; nil in every store the sink opens.
	crashAt func(step string) bool
}

// logID is the short form of a topic ID used in names and the checkpoint: 12 hex digits.
func logID(topicID string) string {
	if len(topicID) > 12 {
		return topicID[:12]
	}
	return topicID
}

// setLog records which incarnation of topic this run consumes (its topic ID, "" if unknown).
func (s *store) setLog(topic, topicID string) { s.logs[topic] = logID(topicID) }

func (s *store) key(pk partKey) journal.Key {
	return journal.Key{Log: s.logs[pk.topic], Topic: pk.topic, Partition: pk.partition}
}

// openStore recovers dir as the package documentation describes and returns the store.
func openStore(ctx context.Context, dir string, log *slog.Logger) (*store, error) {
	cp, err := journal.ReadCheckpoint(dir)
	if err != nil {
		return nil, err
	}
	s := &store{dir: dir, log: log, cp: cp, logs: map[string]string{}, runs: map[string]*runState{}}
	// Roll forward the last flush of each partition: its checkpoint is written, so it is committed.
	for _, p := range s.cp {
		for _, rel := range p.LastFlush {
			final := filepath.Join(dir, filepath.FromSlash(rel))
			tmp := filepath.Join(filepath.Dir(final), shard.TempPrefix+filepath.Base(final))
			if _, err := os.Stat(tmp); err == nil {
				if err := os.Rename(tmp, final); err != nil {
					return nil, fmt.Errorf("sink: roll forward %s: %w", final, err)
				}
				if err := durable.SyncDir(filepath.Dir(final)); err != nil {
					return nil, err
				}
				log.Info("rolled forward a committed shard", "shard", final)
			} else if _, err := os.Stat(final); err != nil {
				log.Error("checkpoint names a committed shard that is missing; its rows are lost", "shard", final)
			}
		}
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	if err := removeTemps(dir, ents, log); err != nil {
		return nil, err
	}
	for _, e := range ents {
		if !e.IsDir() {
			continue
		}
		if err := s.loadRun(ctx, filepath.Join(dir, e.Name())); err != nil {
			s.close()
			return nil, err
		}
	}
	return s, nil
}

func (s *store) writeCheckpoint() error { return s.cp.Write(s.dir) }

// removeTemps deletes the uncommitted temporary files among ents (entries of dir).
func removeTemps(dir string, ents []os.DirEntry, log *slog.Logger) error {
	n := 0
	for _, e := range ents {
		if !e.IsDir() && shard.IsTemp(e.Name()) {
			if err := os.Remove(filepath.Join(dir, e.Name())); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
			n++
			log.Info("removed a torn temporary file", "file", filepath.Join(dir, e.Name()))
		}
	}
	if n > 0 {
		return durable.SyncDir(dir)
	}
	return nil
}

// loadRun recovers one run directory: removes torn temporary files, reconciles the manifest with the shards
// on disk, advances the next offsets past its shards and brings its id index up to the manifest.
func (s *store) loadRun(ctx context.Context, runDir string) error {
	ents, err := os.ReadDir(runDir)
	if err != nil {
		return err
	}
	if err := removeTemps(runDir, ents, s.log); err != nil {
		return err
	}
	onDisk := map[string]shard.Origin{}
	for _, e := range ents {
		if si, ok := shard.ParseName(e.Name()); ok && !e.IsDir() {
			onDisk[e.Name()] = si
		}
	}
	m, err := shard.ReadManifest(runDir)
	if errors.Is(err, fs.ErrNotExist) {
		if len(onDisk) == 0 {
			return nil // not a run directory
		}
		m = &shard.Manifest{FormatVersion: shard.FormatVersion, Schema: shard.Columns()}
	} else if err != nil {
		return fmt.Errorf("sink: %w", err)
	}
	changed := false
	kept := m.Shards[:0]
	listed := map[string]bool{}
	for _, sh := range m.Shards {
		if _, ok := onDisk[sh.File]; !ok {
			s.log.Error("manifest lists a shard that is missing; dropping it from the manifest", "run", runDir, "shard", sh.File)
			changed = true
			continue
		}
		listed[sh.File] = true
		kept = append(kept, sh)
	}
	m.Shards = kept
	names := slices.Sorted(maps.Keys(onDisk))
	for _, name := range names {
		if listed[name] {
			continue
		}
		// Committed (final name) but not yet in the manifest: the crash came between rename and manifest.
		sh, info, err := describeShard(ctx, filepath.Join(runDir, name), onDisk[name])
		if err != nil {
			return fmt.Errorf("sink: recover %s: %w", filepath.Join(runDir, name), err)
		}
		if m.Run.Fingerprint == "" {
			m.Run = info
		}
		m.Shards = append(m.Shards, sh)
		changed = true
		s.log.Info("added a committed shard to the manifest", "run", runDir, "shard", name)
	}
	if m.Run.Fingerprint == "" {
		return fmt.Errorf("sink: %s has shards but no run identity", runDir)
	}
	if changed {
		if err := shard.WriteManifest(runDir, m); err != nil {
			return err
		}
	}
	counts, stale, err := shard.LoadCounts(ctx, runDir, m)
	if err != nil {
		return fmt.Errorf("sink: recover token counts: %w", err)
	}
	if stale {
		if err := shard.WriteCounts(runDir, m, counts); err != nil {
			return fmt.Errorf("sink: recover token counts: %w", err)
		}
		s.log.Info("counted the generated tokens of shards the token counts did not cover", "run", runDir)
	}
	for _, sh := range m.Shards {
		si := onDisk[sh.File]
		s.advanceKey(journal.Key{Log: si.Log, Topic: si.Topic, Partition: si.Partition}, si.LastOffset+1)
	}
	if prev, ok := s.runs[m.Run.Fingerprint]; ok {
		return fmt.Errorf("sink: runs %s and %s have the same fingerprint", prev.dir, runDir)
	}
	index, err := openIndex(ctx, runDir, m, s.log)
	if err != nil {
		return err
	}
	s.runs[m.Run.Fingerprint] = &runState{info: m.Run, dir: runDir, manifest: *m, index: index, buffered: map[rowKey]struct{}{}, counts: counts}
	s.log.Info("recovered run", "run", runDir, "shards", len(m.Shards), "rows", m.Totals.Rows)
	return nil
}

// describeShard builds the manifest entry of a committed shard from the file itself.
func describeShard(ctx context.Context, path string, si shard.Origin) (shard.ManifestShard, shard.RunInfo, error) {
	sum, size, err := durable.FileSHA256(path)
	if err != nil {
		return shard.ManifestShard{}, shard.RunInfo{}, err
	}
	sf, err := shard.Open(path)
	if err != nil {
		return shard.ManifestShard{}, shard.RunInfo{}, err
	}
	defer sf.Close()
	var info shard.RunInfo
	if err := json.Unmarshal([]byte(sf.Meta(shard.MetaRun)), &info); err != nil {
		return shard.ManifestShard{}, shard.RunInfo{}, fmt.Errorf("bad %s metadata: %w", shard.MetaRun, err)
	}
	sh := shard.ManifestShard{File: filepath.Base(path), Rows: sf.NumRows(), Bytes: size, SHA256: sum,
		Topic: si.Topic, Partition: si.Partition, FirstOffset: si.FirstOffset, LastOffset: si.LastOffset, Log: si.Log}
	sh.Origins = map[string]int64{}
	err = sf.Scan(ctx, []shard.Col{shard.ColPromptLen, shard.ColCompletionLen, shard.ColOrigin}, func(r *shard.Row) error {
		sh.PromptTokens += int64(r.PromptLen)
		sh.CompletionTokens += int64(r.CompletionLen)
		sh.Origins[r.Origin]++
		return nil
	})
	sh.Tokens = sh.PromptTokens + sh.CompletionTokens
	return sh, info, err
}

// close closes the id indexes of every run.
func (s *store) close() error {
	var first error
	for _, rs := range s.runs {
		first = cmp.Or(first, rs.index.close())
		rs.index = nil
	}
	return first
}

// next returns the first offset of a partition of the consumed incarnation not yet in a shard (0 if none is).
func (s *store) next(pk partKey) int64 { return s.cp.Next(s.key(pk)) }

// nextKey is next for a partition of any incarnation.
func (s *store) nextKey(k journal.Key) int64 { return s.cp.Next(k) }

func (s *store) advance(pk partKey, next int64) { s.advanceKey(s.key(pk), next) }

func (s *store) advanceKey(k journal.Key, next int64) {
	p := s.cp[k]
	if p == nil {
		p = &journal.Partition{Log: k.Log, Topic: k.Topic, Partition: k.Partition}
		s.cp[k] = p
	}
	if next > p.Next {
		p.Next = next
	}
}

// run returns the run of a generation's settings, creating its state (not yet its directory) if new.
func (s *store) run(info shard.RunInfo) *runState {
	if rs, ok := s.runs[info.Fingerprint]; ok {
		return rs
	}
	rs := &runState{info: info, dir: filepath.Join(s.dir, info.DirName()),
		manifest: shard.Manifest{FormatVersion: shard.FormatVersion, Run: info, Schema: shard.Columns()},
		buffered: map[rowKey]struct{}{}, counts: &shard.Counts{}}
	s.runs[info.Fingerprint] = rs
	return rs
}

// errCrashed is what commitFlush returns when store.crashAt stopped it.
var errCrashed = errors.New("sink: simulated crash")

// crashed reports whether the store's crashAt hook stops commitFlush at step.
func (s *store) crashed(step string) bool { return s.crashAt != nil && s.crashAt(step) }

// runRows are the rows of one run in a flush.
type runRows struct {
	run  *runState
	rows []*shard.WriteRow
}

// committedShard is a shard a flush made durable.
type committedShard struct {
	run    *runState
	entry  shard.ManifestShard
	ids    []string // the account keys (topics.AccountKey) of the rows that ended their conversation (every row but continued turns)
	keys   []indexEntry
	counts *shard.Counts // generated-token counts of the shard
}

// commitFlush makes the rows of one partition's offset range [first, last] durable, one shard per run, and
// moves the partition's next offset to last+1. See the package documentation for the protocol.
func (s *store) commitFlush(pk partKey, first, last int64, groups []runRows, rowGroupRows int) ([]committedShard, error) {
	return s.commitFlushKey(s.key(pk), first, last, groups, rowGroupRows)
}

// commitFlushKey is commitFlush for a partition of any incarnation of its topic (the journal of an earlier one).
func (s *store) commitFlushKey(k journal.Key, first, last int64, groups []runRows, rowGroupRows int) ([]committedShard, error) {
	si := shard.Origin{Log: k.Log, Topic: k.Topic, Partition: k.Partition, FirstOffset: first, LastOffset: last}
	name := si.Name()
	var out []committedShard
	var tmps []string
	cleanup := func() {
		for _, t := range tmps {
			os.Remove(t)
		}
	}
	dirs := map[string]bool{}
	for _, g := range groups {
		if len(g.rows) == 0 {
			continue
		}
		c, err := s.writeTemp(g, si, rowGroupRows)
		if err != nil {
			cleanup()
			return nil, err
		}
		tmps = append(tmps, filepath.Join(g.run.dir, shard.TempPrefix+name))
		if s.crashed("shard-written") {
			return nil, errCrashed
		}
		out = append(out, c)
		dirs[g.run.dir] = true
	}
	for d := range dirs {
		if err := durable.SyncDir(d); err != nil {
			cleanup()
			return nil, err
		}
	}
	if s.crashed("shards-synced") {
		return nil, errCrashed
	}
	// Commit point.
	p := s.cp[k]
	if p == nil {
		p = &journal.Partition{Log: k.Log, Topic: k.Topic, Partition: k.Partition}
		s.cp[k] = p
	}
	prev := *p
	p.Next = last + 1
	p.LastFlush = p.LastFlush[:0:0]
	for _, c := range out {
		p.LastFlush = append(p.LastFlush, filepath.ToSlash(filepath.Join(filepath.Base(c.run.dir), name)))
	}
	if err := s.writeCheckpoint(); err != nil {
		if errors.Is(err, durable.ErrRenamedNotSynced) {
			// The new checkpoint may be the one a restart reads: keep the temporary shards it names, so the
			// roll-forward publishes them (or, if the old checkpoint survived, deletes them as torn). The sink
			// stops; nothing of this flush is acknowledged.
			return nil, fmt.Errorf("sink: write checkpoint: %w", err)
		}
		*p = prev
		cleanup()
		return nil, fmt.Errorf("sink: write checkpoint: %w", err)
	}
	// Committed: from here on a failure is repaired by the roll-forward on the next start.
	if s.crashed("checkpoint-written") {
		return nil, errCrashed
	}
	if err := s.publish(out, name, dirs); err != nil {
		return nil, err
	}
	return out, nil
}

// writeTemp writes the rows of g as the temporary shard of origin si in the run's directory (creating the
// directory and the run's id index if new) and returns what committing it will take.
func (s *store) writeTemp(g runRows, si shard.Origin, rowGroupRows int) (committedShard, error) {
	name := si.Name()
	if _, err := os.Stat(g.run.dir); errors.Is(err, fs.ErrNotExist) {
		if err := os.MkdirAll(g.run.dir, 0o755); err != nil {
			return committedShard{}, err
		}
		if err := durable.SyncDir(s.dir); err != nil {
			return committedShard{}, err
		}
	}
	if err := s.recordConfig(g.run.dir); err != nil {
		return committedShard{}, err
	}
	if g.run.index == nil {
		// A new run: its index starts empty, covering its empty manifest.
		x, err := openIndex(context.Background(), g.run.dir, &g.run.manifest, s.log)
		if err != nil {
			return committedShard{}, err
		}
		g.run.index = x
	}
	if _, err := os.Stat(filepath.Join(g.run.dir, name)); err == nil {
		// Never overwrite: the topic's offsets restarted without a new topic ID (a broker that reports none).
		return committedShard{}, fmt.Errorf("sink: shard %s already exists in %s; the topic's offsets were reset on a broker that reports no topic IDs, use a new output directory", name, g.run.dir)
	}
	tmp := filepath.Join(g.run.dir, shard.TempPrefix+name)
	entry, err := shard.WriteFile(tmp, g.run.info, si, g.rows, shard.WriteOptions{RowGroupRows: rowGroupRows, ZstdLevel: s.zstd})
	if err != nil {
		os.Remove(tmp)
		return committedShard{}, fmt.Errorf("sink: write %s: %w", tmp, err)
	}
	entry.File = name
	var ids []string
	keys := make([]indexEntry, len(g.rows))
	for i, r := range g.rows {
		keys[i] = indexEntry{rowKey{r.ID, r.Turn}, indexValue(r.StopReason, r.Reply, si.Log)}
		if r.StopReason != topics.StopContinued {
			ids = append(ids, accountKey(r))
		}
	}
	counts := &shard.Counts{}
	counts.AddOutputs(g.rows)
	return committedShard{run: g.run, entry: entry, ids: ids, keys: keys, counts: counts}, nil
}

// recordConfig writes the process's configuration (Config.JobConfig) into the run directory dir, once: a file
// already there with its name holds it.
func (s *store) recordConfig(dir string) error {
	if len(s.jobConfig) == 0 || s.recorded[dir] {
		return nil
	}
	path := filepath.Join(dir, shard.ConfigFile(s.jobConfig))
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		if err := shard.WriteFileAtomic(path, s.jobConfig); err != nil {
			return fmt.Errorf("sink: record the configuration: %w", err)
		}
	} else if err != nil {
		return err
	}
	if s.recorded == nil {
		s.recorded = map[string]bool{}
	}
	s.recorded[dir] = true
	return nil
}

// publish makes the committed shards of a flush (temporary name name in the run directories dirs) what readers
// see: it renames them to their final name, then updates each run's manifest, token counts and id index.
func (s *store) publish(out []committedShard, name string, dirs map[string]bool) error {
	for _, c := range out {
		if err := os.Rename(filepath.Join(c.run.dir, shard.TempPrefix+name), filepath.Join(c.run.dir, name)); err != nil {
			return fmt.Errorf("sink: publish shard: %w", err)
		}
		if s.crashed("shard-renamed") {
			return errCrashed
		}
	}
	for d := range dirs {
		if err := durable.SyncDir(d); err != nil {
			return err
		}
	}
	for _, c := range out {
		c.run.manifest.Shards = append(c.run.manifest.Shards, c.entry)
		if c.run.manifest.ModelPath == "" {
			c.run.manifest.ModelPath = s.modelPath
		}
		if err := shard.WriteManifest(c.run.dir, &c.run.manifest); err != nil {
			return fmt.Errorf("sink: write manifest: %w", err)
		}
		if s.crashed("manifest-written") {
			return errCrashed
		}
		c.run.counts.AddCounts(c.counts)
		if err := shard.WriteCounts(c.run.dir, &c.run.manifest, c.run.counts); err != nil {
			return fmt.Errorf("sink: write token counts: %w", err)
		}
		if s.crashed("counts-written") {
			return errCrashed
		}
		if err := c.run.index.add(c.keys, coverOf(&c.run.manifest, len(c.run.manifest.Shards))); err != nil {
			return fmt.Errorf("sink: update id index: %w", err)
		}
		if s.crashed("index-written") {
			return errCrashed
		}
	}
	return nil
}
