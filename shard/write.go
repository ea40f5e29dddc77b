package shard

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash"
	"io"
	"maps"
	"math"
	"os"
	"regexp"
	"slices"
	"strconv"
	"unsafe"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/array"
	"github.com/apache/arrow/go/v17/arrow/memory"
	"github.com/apache/arrow/go/v17/parquet"
	"github.com/apache/arrow/go/v17/parquet/compress"
	"github.com/apache/arrow/go/v17/parquet/pqarrow"

	"github.com/draftflow/draftflow/internal/parquetcodec"
	"github.com/draftflow/draftflow/topics"
)

// DefaultRowGroupRows is the most rows per Parquet row group when WriteOptions.RowGroupRows is 0.
const DefaultRowGroupRows = 1024

// DefaultShardRows is how many rows a writer puts in one shard unless told otherwise: the sink's rotation
// (sink.Config.RotateRows) and the offline merge's.
const DefaultShardRows = 10000

// WriteRow is one row as Write takes it: a generation's prompt and output token ids, as the tokenizer and the
// server gave them, and its metadata columns.
type WriteRow struct {
	ID, Dataset, FinishReason, Endpoint string
	StopReason, Reply                   string
	// Origin is where the output came from (topics.Origins); empty is written as topics.OriginGenerated.
	Origin string
	Turn   int32
	// Mask, when set, is the loss mask of Prompt+Output instead of zeros then ones: a merged conversation's
	// row, whose prompt holds the earlier turns' outputs, marked 1.
	Mask           []uint8
	Prompt, Output []uint32
}

// Tokens is the row's length: prompt and output tokens.
func (r *WriteRow) Tokens() int { return len(r.Prompt) + len(r.Output) }

// Origin locates a shard in the log it was written from.
type Origin struct {
	// Log is the short ID of the topic incarnation (12 hex digits of its topic ID), "" when the broker
	// reports none.
	Log         string
	Topic       string
	Partition   int
	FirstOffset int64
	LastOffset  int64
}

// Name returns the final file name of a shard: topic+partition+first-last+log.parquet, offsets zero-padded so
// names sort in offset order, log the topic incarnation (omitted when unknown). '+' cannot occur in a Kafka
// topic name.
func (o Origin) Name() string {
	name := fmt.Sprintf("%s+%d+%012d-%012d", o.Topic, o.Partition, o.FirstOffset, o.LastOffset)
	if o.Log != "" {
		name += "+" + o.Log
	}
	return name + ".parquet"
}

var nameRE = regexp.MustCompile(`^([A-Za-z0-9._-]+)\+([0-9]+)\+([0-9]+)-([0-9]+)(?:\+([0-9a-f]{1,32}))?\.parquet$`)

// ParseName is the inverse of Origin.Name: it reports whether name is the final name of a shard, and where
// the shard came from.
func ParseName(name string) (Origin, bool) {
	if IsTemp(name) {
		return Origin{}, false
	}
	m := nameRE.FindStringSubmatch(name)
	if m == nil {
		return Origin{}, false
	}
	p, err1 := strconv.Atoi(m[2])
	f, err2 := strconv.ParseInt(m[3], 10, 64)
	l, err3 := strconv.ParseInt(m[4], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil || l < f {
		return Origin{}, false
	}
	return Origin{Log: m[5], Topic: m[1], Partition: p, FirstOffset: f, LastOffset: l}, true
}

// Stats are the counts of a written shard.
type Stats struct {
	Rows, Tokens, PromptTokens, CompletionTokens int64
	// Origins counts the rows by origin.
	Origins map[string]int64
}

// WriteOptions are the Parquet settings of a shard. The zero value is the default.
type WriteOptions struct {
	// RowGroupRows is the most rows per row group (default DefaultRowGroupRows).
	RowGroupRows int
	// ZstdLevel is the zstd level (default 0: zstd's default, 3).
	ZstdLevel int
}

// writerProps are the Parquet settings of every shard: zstd, dictionaries for the string columns, no
// statistics on the token lists (useless for pruning, and they cost time).
func writerProps(rowGroupRows, zstdLevel int) *parquet.WriterProperties {
	level := compress.DefaultCompressionLevel
	if zstdLevel > 0 {
		level = zstdLevel
	}
	return parquet.NewWriterProperties(
		parquet.WithCompression(compress.Codecs.Zstd),
		parquet.WithCompressionLevel(level),
		parquet.WithDictionaryDefault(true),
		parquet.WithDictionaryFor("input_ids.list.element", false),
		parquet.WithStatsFor("input_ids.list.element", false),
		parquet.WithStatsFor("loss_mask.list.element", false),
		parquet.WithMaxRowGroupLength(int64(rowGroupRows)),
		parquet.WithCreatedBy("draftflow sink"),
	)
}

// maxRowGroupTokens caps a row group's tokens so huge rows do not make huge row groups.
const maxRowGroupTokens = 16 << 20

// Write writes rows of the run as one Parquet shard to w, with the key-value metadata of run and o (and
// MetaRows and MetaTokens). Token ids must fit int32 (CheckTokenRange).
func Write(w io.Writer, run RunInfo, o Origin, rows []*WriteRow, opt WriteOptions) (Stats, error) {
	parquetcodec.Register()
	rowGroupRows := opt.RowGroupRows
	if rowGroupRows <= 0 {
		rowGroupRows = DefaultRowGroupRows
	}
	st := Stats{Origins: map[string]int64{}}
	kv, err := metadata(run, o)
	if err != nil {
		return st, err
	}
	keys := slices.Sorted(maps.Keys(kv))
	vals := make([]string, len(keys))
	for i, k := range keys {
		vals[i] = kv[k]
	}
	sc := arrow.NewSchema(schema.Fields(), func() *arrow.Metadata { m := arrow.NewMetadata(keys, vals); return &m }())
	fw, err := pqarrow.NewFileWriter(sc, w, writerProps(rowGroupRows, opt.ZstdLevel), pqarrow.NewArrowWriterProperties(pqarrow.WithStoreSchema()))
	if err != nil {
		return st, err
	}
	b := array.NewRecordBuilder(memory.DefaultAllocator, sc)
	defer b.Release()
	app := newAppender(b, rows)
	for start := 0; start < len(rows); {
		end, toks := start, 0
		for end < len(rows) && end-start < rowGroupRows && (end == start || toks+rows[end].Tokens() <= maxRowGroupTokens) {
			toks += rows[end].Tokens()
			end++
		}
		app.reserve(toks)
		for _, r := range rows[start:end] {
			app.append(r)
			st.Origins[topics.OriginOf(r.Origin)]++
			st.Rows++
			st.PromptTokens += int64(len(r.Prompt))
			st.CompletionTokens += int64(len(r.Output))
		}
		rec := b.NewRecord()
		err := fw.Write(rec)
		rec.Release()
		if err != nil {
			fw.Close()
			return st, err
		}
		start = end
	}
	st.Tokens = st.PromptTokens + st.CompletionTokens
	if err := fw.AppendKeyValueMetadata(MetaRows, strconv.FormatInt(st.Rows, 10)); err != nil {
		return st, err
	}
	if err := fw.AppendKeyValueMetadata(MetaTokens, strconv.FormatInt(st.Tokens, 10)); err != nil {
		return st, err
	}
	return st, fw.Close()
}

// appender appends rows to the column builders of a record.
type appender struct {
	ids, fr, ds, ep, sr, rp *array.StringBuilder
	orig                    *array.StringBuilder
	inLB, maskLB            *array.ListBuilder
	inVB                    *array.Int32Builder
	maskVB                  *array.Uint8Builder
	pl, cl, tn              *array.Int32Builder
	// zeros and ones are at least as long as any prompt and output of the rows: loss masks are slices of them.
	zeros, ones []uint8
}

func newAppender(b *array.RecordBuilder, rows []*WriteRow) *appender {
	a := &appender{
		ids:    b.Field(int(ColID)).(*array.StringBuilder),
		inLB:   b.Field(int(ColInputIDs)).(*array.ListBuilder),
		maskLB: b.Field(int(ColLossMask)).(*array.ListBuilder),
		pl:     b.Field(int(ColPromptLen)).(*array.Int32Builder),
		cl:     b.Field(int(ColCompletionLen)).(*array.Int32Builder),
		fr:     b.Field(int(ColFinishReason)).(*array.StringBuilder),
		ds:     b.Field(int(ColDataset)).(*array.StringBuilder),
		tn:     b.Field(int(ColTurn)).(*array.Int32Builder),
		ep:     b.Field(int(ColEndpoint)).(*array.StringBuilder),
		sr:     b.Field(int(ColStopReason)).(*array.StringBuilder),
		rp:     b.Field(int(ColReply)).(*array.StringBuilder),
		orig:   b.Field(int(ColOrigin)).(*array.StringBuilder),
	}
	a.inVB = a.inLB.ValueBuilder().(*array.Int32Builder)
	a.maskVB = a.maskLB.ValueBuilder().(*array.Uint8Builder)
	a.zeros, a.ones = maskRuns(rows)
	return a
}

// reserve makes room for toks more token ids and mask values.
func (a *appender) reserve(toks int) {
	a.inVB.Reserve(toks)
	a.maskVB.Reserve(toks)
}

func (a *appender) append(r *WriteRow) {
	a.ids.Append(r.ID)
	a.inLB.Append(true)
	a.inVB.AppendValues(asInt32(r.Prompt), nil)
	a.inVB.AppendValues(asInt32(r.Output), nil)
	a.maskLB.Append(true)
	if r.Mask != nil {
		a.maskVB.AppendValues(r.Mask, nil)
	} else {
		a.maskVB.AppendValues(a.zeros[:len(r.Prompt)], nil)
		a.maskVB.AppendValues(a.ones[:len(r.Output)], nil)
	}
	a.pl.Append(int32(len(r.Prompt)))
	a.cl.Append(int32(len(r.Output)))
	a.fr.Append(r.FinishReason)
	a.ds.Append(r.Dataset)
	a.tn.Append(r.Turn)
	a.ep.Append(r.Endpoint)
	a.sr.Append(r.StopReason)
	a.rp.Append(r.Reply)
	a.orig.Append(topics.OriginOf(r.Origin))
}

// asInt32 reinterprets token ids as int32 without copying; callers reject ids above math.MaxInt32 first.
func asInt32(s []uint32) []int32 {
	if len(s) == 0 {
		return nil
	}
	return unsafe.Slice((*int32)(unsafe.Pointer(&s[0])), len(s))
}

// maskRuns returns a run of zeros and a run of ones at least as long as any prompt and output in rows, for
// building loss masks by slicing.
func maskRuns(rows []*WriteRow) (zeros, ones []uint8) {
	np, no := 0, 0
	for _, r := range rows {
		np, no = max(np, len(r.Prompt)), max(no, len(r.Output))
	}
	zeros, ones = make([]uint8, np), make([]uint8, no)
	for i := range ones {
		ones[i] = 1
	}
	return zeros, ones
}

// metadata returns the key-value metadata of a shard (MetaRows and MetaTokens are added by Write).
func metadata(run RunInfo, o Origin) (map[string]string, error) {
	runJSON, err := json.Marshal(run)
	if err != nil {
		return nil, fmt.Errorf("shard metadata: %w", err)
	}
	schemaJSON, _ := json.Marshal(columns) // strings only: always encodes
	return map[string]string{
		MetaFormat:      strconv.Itoa(FormatVersion),
		MetaSchema:      string(schemaJSON),
		MetaRun:         string(runJSON),
		MetaTopic:       o.Topic,
		MetaPartition:   strconv.Itoa(o.Partition),
		MetaFirstOffset: strconv.FormatInt(o.FirstOffset, 10),
		MetaLastOffset:  strconv.FormatInt(o.LastOffset, 10),
		MetaLog:         o.Log,
	}, nil
}

// WriteFile writes rows to path as Write does, fsyncs the file and returns its manifest entry (File left
// empty: path may be a temporary name).
func WriteFile(path string, run RunInfo, o Origin, rows []*WriteRow, opt WriteOptions) (ManifestShard, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return ManifestShard{}, err
	}
	bw := bufio.NewWriterSize(f, 1<<20)
	ch := newCountingHash(bw)
	st, err := Write(ch, run, o, rows, opt)
	if err == nil {
		err = bw.Flush()
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return ManifestShard{}, err
	}
	return ManifestShard{Rows: st.Rows, Tokens: st.Tokens, PromptTokens: st.PromptTokens, CompletionTokens: st.CompletionTokens,
		Bytes: ch.n, SHA256: ch.sum(), Topic: o.Topic, Partition: o.Partition, FirstOffset: o.FirstOffset, LastOffset: o.LastOffset,
		Log: o.Log, Origins: st.Origins}, nil
}

// countingHash counts and hashes what is written through it.
type countingHash struct {
	w io.Writer
	h hash.Hash
	n int64
}

func newCountingHash(w io.Writer) *countingHash { return &countingHash{w: w, h: sha256.New()} }

func (c *countingHash) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.h.Write(p[:n])
	c.n += int64(n)
	return n, err
}

func (c *countingHash) sum() string { return hex.EncodeToString(c.h.Sum(nil)) }

// CheckTokenRange reports the first token id above math.MaxInt32, which an int32 column cannot hold.
func CheckTokenRange(ids []uint32) (uint32, bool) {
	for _, id := range ids {
		if id > math.MaxInt32 {
			return id, false
		}
	}
	return 0, true
}
