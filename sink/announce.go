package sink

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/draftflow/draftflow/kafka"
	"github.com/draftflow/draftflow/shard"
	"github.com/draftflow/draftflow/topics"
)

// announcer announces committed shards on topics.TopicShardFiles (Config.AnnounceShards).
type announcer struct {
	p    *kafka.Producer
	dir  string // the output directory's identity (shard.DirIDFile)
	path string
	log  *slog.Logger
	ctx  context.Context
	warn atomic.Bool
}

// startAnnouncer announces every shard of dir (AnnounceShards) and returns what announces the later ones.
func startAnnouncer(ctx context.Context, kcl *kafka.Client, dir string, log *slog.Logger) (*announcer, error) {
	n, err := AnnounceShards(ctx, kcl, dir)
	if err != nil {
		return nil, err
	}
	id, err := dirID(dir)
	if err != nil {
		return nil, err
	}
	log.Info("announced the shards of the output directory for capture", "topic", kcl.Config().Topic(topics.TopicShardFiles), "shards", n)
	return &announcer{p: kcl.NewProducer(topics.TopicShardFiles, kafka.ProducerConfig{}), dir: id, path: dir, log: log, ctx: ctx}, nil
}

// publish announces one committed shard of the run directory runDir, retrying while the sink runs. A failure
// costs nothing but time: every shard is announced again on the next start.
func (a *announcer) publish(runDir, run string, e shard.ManifestShard) {
	if a == nil {
		return
	}
	rec := shardFileRecord(a.dir, a.path, filepath.Base(runDir), run, e)
	value, err := topics.Marshal(rec)
	if err != nil {
		a.log.Warn("could not announce a shard on the shard-files topic; it is announced again on the next start", "shard", e.File, "err", err)
		return
	}
	a.p.SendRetrying(a.ctx, topics.ShardFileKey(rec.RunDir, rec.File), value, func(err error) {
		if err != nil && a.ctx.Err() == nil && a.warn.CompareAndSwap(false, true) {
			a.log.Warn("could not announce a shard on the shard-files topic; it is announced again on the next start", "shard", e.File, "err", err)
		}
	})
}

// Close closes the announcer's producer once every announcement sent has been answered.
func (a *announcer) Close() error {
	if a == nil {
		return nil
	}
	return a.p.Close()
}

func shardFileRecord(dirID, path, runDir, run string, e shard.ManifestShard) *topics.ShardFile {
	return &topics.ShardFile{Run: run, RunDir: runDir, File: e.File, Rows: e.Rows, Tokens: e.Tokens, SHA256: e.SHA256,
		Dir: dirID, Path: path, Time: time.Now().UTC()}
}

// AnnounceShards writes a topics.ShardFile for every shard of every run under dir (an output directory) to
// topics.TopicShardFiles, creating the topic (compacted) if needed, and returns how many it wrote once the
// broker acknowledged them all. The sink does it on every start with Config.AnnounceShards; `draftflow run`
// with capture does it again once its sink has stopped, so the capture stage sees the shards of the final
// flush whatever became of their first announcement.
func AnnounceShards(ctx context.Context, kcl *kafka.Client, dir string) (int, error) {
	if err := kcl.Admin().EnsureCompactedTopic(ctx, topics.TopicShardFiles); err != nil {
		return 0, fmt.Errorf("sink: %w", err)
	}
	runs, err := shard.RunDirs(dir)
	if err != nil {
		return 0, fmt.Errorf("sink: announce shards: %w", err)
	}
	id, err := dirID(dir)
	if err != nil {
		return 0, err
	}
	p := kcl.NewProducer(topics.TopicShardFiles, kafka.ProducerConfig{})
	n := 0
	for _, rd := range runs {
		m, err := shard.ReadManifest(rd)
		if err != nil {
			p.Close()
			return n, fmt.Errorf("sink: announce shards: %w", err)
		}
		for _, e := range m.Shards {
			rec := shardFileRecord(id, dir, filepath.Base(rd), m.Run.Fingerprint, e)
			value, err := topics.Marshal(rec)
			if err == nil {
				err = p.SendSync(ctx, topics.ShardFileKey(rec.RunDir, rec.File), value)
			}
			if err != nil {
				p.Close()
				return n, fmt.Errorf("sink: announce %s on %s: %w", e.File, topics.TopicShardFiles, err)
			}
			n++
		}
	}
	return n, p.Close()
}
