package journal

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"

	"github.com/draftflow/draftflow/shard"
)

// Key names a partition of one incarnation of a topic: what the checkpoint's offsets and a journal segment
// belong to.
type Key struct {
	// Log is the short topic ID of the topic incarnation ("" when the broker reports none).
	Log       string
	Topic     string
	Partition int
}

// compare orders keys by topic, incarnation and partition.
func (k Key) compare(o Key) int {
	return cmp.Or(cmp.Compare(k.Topic, o.Topic), cmp.Compare(k.Log, o.Log), cmp.Compare(k.Partition, o.Partition))
}

// CheckpointName is the file, directly in the output directory, that holds the recovery point.
const CheckpointName = "checkpoint.json"

// Partition is one partition's recovery point: the next offset not yet in a shard, and the shards of the
// partition's last flush (rolled forward on start if the crash came before their rename).
type Partition struct {
	// Log is the short topic ID of the topic incarnation the offsets belong to ("" if unknown).
	Log       string `json:"log,omitempty"`
	Topic     string `json:"topic"`
	Partition int    `json:"partition"`
	Next      int64  `json:"next"`
	// LastFlush holds the shards of the last flush, as "run-dir/file" relative to the output directory.
	LastFlush []string `json:"last_flush,omitempty"`
}

// Key is the partition's key.
func (p *Partition) Key() Key { return Key{p.Log, p.Topic, p.Partition} }

// Checkpoint is the recovery point of every partition the sink has flushed, by key.
type Checkpoint map[Key]*Partition

// Next returns the first offset of partition k not yet in a shard (0 if none is).
func (c Checkpoint) Next(k Key) int64 {
	if p := c[k]; p != nil {
		return p.Next
	}
	return 0
}

// checkpointFile is CheckpointName's content.
type checkpointFile struct {
	FormatVersion int         `json:"format_version"`
	Partitions    []Partition `json:"partitions"`
}

// ReadCheckpoint reads the checkpoint of the output directory dir; a directory without one has an empty one.
func ReadCheckpoint(dir string) (Checkpoint, error) {
	path := filepath.Join(dir, CheckpointName)
	cp := Checkpoint{}
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return cp, nil
	}
	if err != nil {
		return nil, err
	}
	var f checkpointFile
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("sink: %s is unreadable (%w); it is written atomically, so this is outside damage", path, err)
	}
	if f.FormatVersion != shard.FormatVersion {
		return nil, fmt.Errorf("sink: %s has format version %d, this build reads %d", path, f.FormatVersion, shard.FormatVersion)
	}
	for i := range f.Partitions {
		p := f.Partitions[i]
		cp[p.Key()] = &p
	}
	return cp, nil
}

// Write replaces the checkpoint of the output directory dir with c, atomically (shard.WriteJSONAtomic): the
// rename is the commit point of a flush. An error wrapping durable.ErrRenamedNotSynced came after the rename.
func (c Checkpoint) Write(dir string) error {
	f := checkpointFile{FormatVersion: shard.FormatVersion}
	for _, p := range c {
		f.Partitions = append(f.Partitions, *p)
	}
	slices.SortFunc(f.Partitions, func(a, b Partition) int { return a.Key().compare(b.Key()) })
	return shard.WriteJSONAtomic(filepath.Join(dir, CheckpointName), &f)
}
