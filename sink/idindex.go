package sink

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/draftflow/draftflow/shard"
	"github.com/draftflow/draftflow/topics"
)

// IDIndexFile is the file, in each run directory, that indexes the (id, turn) keys of the run's committed
// shards, so that the sink finds duplicates without holding every key in memory. It is a bbolt database (one
// file, copy-on-write B+tree, atomic fsynced transactions). The sink updates it after the token counts at every
// flush: it adds the flush's keys (in transactions of indexChunk keys, which name the shard being added) and,
// in the last transaction, records which manifest shards the index covers (how many from the first, the last
// one's name and their rows). The shards and the manifest stay the source of truth: a crash before that last
// transaction leaves the index covering a prefix of the manifest (plus some keys of the manifest's next shard),
// and the sink adds the keys of the shards past it on start; an index that is missing, unreadable, covers
// shards the manifest no longer lists or holds keys of a shard it does not list next is rebuilt from the shards.
const IDIndexFile = "id_index.bolt"

var (
	indexKeys   = []byte("keys")
	indexMeta   = []byte("meta")
	indexCover  = []byte("cover")
	indexAdding = []byte("adding") // the shard whose keys are being added, while its transactions run
)

// indexChunk is how many keys one transaction of idIndex.add puts. Keys of content-hash ids fall on about one
// B+tree page each, and bbolt holds every page a transaction touches in memory until it commits: the chunk
// bounds that memory (tens of MiB) whatever the flush size and the size of the index.
const indexChunk = 4096

// idCover is what an id index covers: the first Shards shards of the manifest, the last of them LastShard,
// holding Rows rows (one key each).
type idCover struct {
	FormatVersion int    `json:"format_version"`
	Shards        int    `json:"shards"`
	LastShard     string `json:"last_shard"`
	Rows          int64  `json:"rows"`
}

// coverOf is the cover of the first n shards of m.
func coverOf(m *shard.Manifest, n int) idCover {
	c := idCover{FormatVersion: shard.FormatVersion, Shards: n}
	for _, sh := range m.Shards[:n] {
		c.Rows += sh.Rows
	}
	if n > 0 {
		c.LastShard = m.Shards[n-1].File
	}
	return c
}

// idIndex is a run's IDIndexFile, open.
type idIndex struct {
	db *bolt.DB
}

// indexKey encodes a row key: the id's bytes, then the turn as 4 big-endian bytes (a fixed-length suffix, so
// any id is unambiguous).
// An id too long for a bbolt key (over 32 KiB) is replaced by its SHA-256 behind a 0xFF marker byte.
func indexKey(k rowKey) []byte {
	id := k.id
	if len(id)+4 > bolt.MaxKeySize {
		sum := sha256.Sum256([]byte(id))
		id = "\xff" + string(sum[:])
	}
	b := make([]byte, 0, len(id)+4)
	return binary.BigEndian.AppendUint32(append(b, id...), uint32(k.turn))
}

// An index value says how the row's turn bears on its conversation (bbolt's Get returns nil for an absent key):
//
//	0x01                              the row ended its conversation (or predates stop reasons)
//	0x02 log 0x00 reply               the next turn was built from it (stop_reason continued): the short
//	                                  topic ID of the generated-topic incarnation it was written from, then
//	                                  its reply (the Message JSON), to build that turn again if the prompts
//	                                  of that incarnation are gone (see sinker.handleLocked)
const (
	valueEnded     = 1
	valueContinued = 2
)

// winner is what the index holds of the copy of a row that is in the shards.
type winner struct {
	continued bool
	log       string // with continued: the incarnation of the generated topic it was read from
	reply     []byte // with continued: its reply, a topics.Message in JSON
}

// indexValue encodes the index value of a row written from the incarnation log.
func indexValue(stopReason, reply, log string) []byte {
	if stopReason != topics.StopContinued {
		return []byte{valueEnded}
	}
	v := make([]byte, 0, 2+len(log)+len(reply))
	v = append(v, valueContinued)
	v = append(v, log...)
	v = append(v, 0)
	return append(v, reply...)
}

func decodeWinner(v []byte) winner {
	if len(v) == 0 || v[0] != valueContinued {
		return winner{}
	}
	log, reply, _ := bytes.Cut(v[1:], []byte{0})
	return winner{continued: true, log: string(log), reply: slices.Clone(reply)}
}

// indexEntry is one key of the index with its value.
type indexEntry struct {
	key   rowKey
	value []byte
}

func openBolt(path string) (*bolt.DB, error) {
	// One sink owns a directory (DIR/.lock); the timeout only turns a stray second opener into an error.
	return bolt.Open(path, 0o644, &bolt.Options{Timeout: 5 * time.Second, FreelistType: bolt.FreelistMapType})
}

// openIndex opens the id index of runDir and brings it up to m: it adds the keys of the shards past what the
// index covers, or rebuilds it from every shard when it is missing, unreadable or covers shards m does not list
// (in that order).
func openIndex(ctx context.Context, runDir string, m *shard.Manifest, log *slog.Logger) (*idIndex, error) {
	path := filepath.Join(runDir, IDIndexFile)
	x, from, err := openCovering(path, m)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			log.Warn("rebuilding the id index from the shards", "run", runDir, "reason", err)
		}
		if x != nil {
			x.close()
		}
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
		db, err := openBolt(path)
		if err != nil {
			return nil, fmt.Errorf("sink: create %s: %w", path, err)
		}
		x, from = &idIndex{db: db}, 0
		if err := x.add(nil, coverOf(m, 0)); err != nil {
			x.close()
			return nil, fmt.Errorf("sink: create %s: %w", path, err)
		}
	}
	for i := from; i < len(m.Shards); i++ {
		var keys []indexEntry
		sf, err := shard.Open(filepath.Join(runDir, m.Shards[i].File))
		if err != nil {
			x.close()
			return nil, fmt.Errorf("sink: index ids: %w", err)
		}
		log := m.Shards[i].Log
		err = sf.Scan(ctx, []shard.Col{shard.ColID, shard.ColTurn, shard.ColStopReason, shard.ColReply}, func(r *shard.Row) error {
			keys = append(keys, indexEntry{rowKey{r.ID, r.Turn}, indexValue(r.StopReason, r.Reply, log)})
			return nil
		})
		sf.Close()
		if err == nil {
			err = x.add(keys, coverOf(m, i+1))
		}
		if err != nil {
			x.close()
			return nil, fmt.Errorf("sink: index ids of %s: %w", m.Shards[i].File, err)
		}
	}
	if from < len(m.Shards) && from > 0 {
		log.Info("indexed the ids of shards the id index did not cover", "run", runDir, "shards", len(m.Shards)-from)
	}
	return x, nil
}

// openCovering opens an existing index and returns how many shards of m it covers; an error says why it
// cannot be used (fs.ErrNotExist: there is none). A damaged file can make bbolt panic rather than fail, or
// fault on a page past the end of a truncated file (turned into a panic here); that is an unusable index too.
func openCovering(path string, m *shard.Manifest) (x *idIndex, from int, err error) {
	if _, err := os.Stat(path); err != nil {
		return nil, 0, err
	}
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("damaged: %v", p)
		}
	}()
	db, err := openBolt(path)
	if err != nil {
		return nil, 0, err
	}
	x = &idIndex{db: db}
	var c idCover
	var adding string
	err = db.View(func(tx *bolt.Tx) error {
		meta := tx.Bucket(indexMeta)
		if meta == nil || tx.Bucket(indexKeys) == nil {
			return errors.New("no buckets")
		}
		adding = string(meta.Get(indexAdding))
		return json.Unmarshal(meta.Get(indexCover), &c)
	})
	if err == nil {
		switch {
		case c.FormatVersion != shard.FormatVersion:
			err = fmt.Errorf("format version %d, this build reads %d", c.FormatVersion, shard.FormatVersion)
		case c.Shards < 0 || c.Shards > len(m.Shards) || coverOf(m, c.Shards) != c:
			err = fmt.Errorf("covers %d shards up to %q (%d rows), which the manifest does not list", c.Shards, c.LastShard, c.Rows)
		case adding != "" && (c.Shards == len(m.Shards) || m.Shards[c.Shards].File != adding):
			// Some keys of a shard past the cover are in; harmless only if that shard is the manifest's next.
			err = fmt.Errorf("holds keys of %s, which the manifest does not list next", adding)
		}
	}
	if err == nil {
		// A check of every page: bbolt trusts its pages, and a torn or overwritten one found later would panic.
		err = db.View(func(tx *bolt.Tx) error {
			var first error
			for e := range tx.Check() {
				first = cmp.Or(first, e) // drained: the check holds the transaction until it ends
			}
			return first
		})
	}
	return x, c.Shards, err
}

// get reports whether k is in the index, and what it holds of its row.
func (x *idIndex) get(k rowKey) (found bool, w winner, err error) {
	if x == nil {
		return false, w, nil
	}
	err = x.db.View(func(tx *bolt.Tx) error {
		v := tx.Bucket(indexKeys).Get(indexKey(k))
		found = v != nil
		w = decodeWinner(v)
		return nil
	})
	return found, w, err
}

// add puts keys, the rows of the shard cover ends with, into the index and records cover. The keys go in
// transactions of indexChunk keys; all but the last name the shard in indexAdding and are not fsynced, the
// last records cover, clears indexAdding and is fsynced (which makes the earlier ones durable too).
func (x *idIndex) add(keys []indexEntry, cover idCover) error {
	type kv struct{ k, v []byte }
	enc := make([]kv, len(keys))
	for i, e := range keys {
		enc[i] = kv{indexKey(e.key), e.value}
	}
	// Sorted keys fill each B+tree page once per transaction.
	slices.SortFunc(enc, func(a, b kv) int { return bytes.Compare(a.k, b.k) })
	cb, err := json.Marshal(&cover)
	if err != nil {
		return err
	}
	defer func() { x.db.NoSync = false }()
	for {
		n := min(len(enc), indexChunk)
		last := n == len(enc)
		x.db.NoSync = !last
		err := x.db.Update(func(tx *bolt.Tx) error {
			b, err := tx.CreateBucketIfNotExists(indexKeys)
			if err != nil {
				return err
			}
			for _, e := range enc[:n] {
				if err := b.Put(e.k, e.v); err != nil {
					return err
				}
			}
			meta, err := tx.CreateBucketIfNotExists(indexMeta)
			if err != nil {
				return err
			}
			if !last {
				return meta.Put(indexAdding, []byte(cover.LastShard))
			}
			if err := meta.Delete(indexAdding); err != nil {
				return err
			}
			return meta.Put(indexCover, cb)
		})
		if err != nil || last {
			return err
		}
		enc = enc[n:]
	}
}

func (x *idIndex) close() error {
	if x == nil {
		return nil
	}
	return x.db.Close()
}
