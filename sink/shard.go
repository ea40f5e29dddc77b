package sink

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/draftflow/draftflow/internal/parquetcodec"
	"io"
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
	"github.com/apache/arrow/go/v17/parquet/file"
	"github.com/apache/arrow/go/v17/parquet/pqarrow"
)

// FormatVersion is the shard and manifest format this package writes.
const FormatVersion = 1

// Parquet key-value metadata keys of a shard.
const (
	MetaFormat      = "draftflow.format"       // FormatVersion
	MetaSchema      = "draftflow.schema"       // JSON list of {name, type, doc}: the column documentation
	MetaRun         = "draftflow.run"          // JSON RunInfo: model, tokenizer hash, sampling, fingerprint
	MetaTopic       = "draftflow.topic"        // physical topic the rows came from
	MetaPartition   = "draftflow.partition"    // partition of that topic
	MetaFirstOffset = "draftflow.first_offset" // first offset of the flush that wrote the shard
	MetaLastOffset  = "draftflow.last_offset"  // last offset of that flush (inclusive)
	MetaLog         = "draftflow.log"          // short topic ID of the topic incarnation the offsets belong to
	MetaRows        = "draftflow.rows"         // rows in the shard
	MetaTokens      = "draftflow.tokens"       // total tokens (sum of input_ids lengths)
)

// Column is one documented shard column.
type Column struct {
	// Name of the column.
	Name string `json:"name"`
	// Type in Arrow notation.
	Type string `json:"type"`
	// Doc says what the column holds.
	Doc string `json:"doc"`
}

// Columns documents the shard schema, in column order. It is written into every shard (MetaSchema) and every
// manifest.
var Columns = []Column{
	{"id", "string", "conversation id, stable across runs; (id, turn) is unique within a run"},
	{"input_ids", "list<int32>", "prompt token ids followed by output token ids, exactly as the target model saw and produced them"},
	{"loss_mask", "list<uint8>", "one per input id: 0 on prompt tokens, 1 on output tokens"},
	{"prompt_len", "int32", "number of prompt tokens (leading zeros of loss_mask)"},
	{"completion_len", "int32", "number of output tokens (trailing ones of loss_mask)"},
	{"finish_reason", "string", "why generation ended: stop or length"},
	{"dataset", "string", "dataset the conversation came from"},
	{"turn", "int32", "index of the generated assistant turn (0 for the first)"},
	{"endpoint", "string", "server that generated the completion"},
	{"stop_reason", "string", "how the turn bears on its conversation: end, continued (the next turn was built from it), tool_divergence, length or parse_error"},
	{"reply", "string", "the completion parsed into an assistant message (JSON: role, content, reasoning_content, tool_calls) for turns of multi-turn conversations; empty otherwise"},
}

// legacyColumns is how many columns shards had before stop_reason and reply; such shards are still read,
// with those two fields empty.
const legacyColumns = 9

var shardSchema = arrow.NewSchema([]arrow.Field{
	{Name: "id", Type: arrow.BinaryTypes.String},
	{Name: "input_ids", Type: arrow.ListOfNonNullable(arrow.PrimitiveTypes.Int32)},
	{Name: "loss_mask", Type: arrow.ListOfNonNullable(arrow.PrimitiveTypes.Uint8)},
	{Name: "prompt_len", Type: arrow.PrimitiveTypes.Int32},
	{Name: "completion_len", Type: arrow.PrimitiveTypes.Int32},
	{Name: "finish_reason", Type: arrow.BinaryTypes.String},
	{Name: "dataset", Type: arrow.BinaryTypes.String},
	{Name: "turn", Type: arrow.PrimitiveTypes.Int32},
	{Name: "endpoint", Type: arrow.BinaryTypes.String},
	{Name: "stop_reason", Type: arrow.BinaryTypes.String},
	{Name: "reply", Type: arrow.BinaryTypes.String},
}, nil)

// Column indices in shardSchema (each column has exactly one Parquet leaf, so these are leaf indices too).
const (
	colID = iota
	colInputIDs
	colLossMask
	colPromptLen
	colCompletionLen
	colFinishReason
	colDataset
	colTurn
	colEndpoint
	colStopReason
	colReply
)

// row is one generation as the sink buffers it.
type row struct {
	id, dataset, finishReason, endpoint string
	stopReason, reply                   string
	turn                                int32
	// mask, when set, is the loss mask of prompt+output instead of zeros then ones: a merged conversation's
	// row (MergeTurns), whose prompt holds the earlier turns' outputs, marked 1.
	mask           []uint8
	prompt, output []uint32
}

func (r *row) tokens() int { return len(r.prompt) + len(r.output) }

// memBytes estimates a buffered row's memory: 4 bytes per token plus 1 for its mask, plus strings.
func (r *row) memBytes() int64 {
	return int64(5*r.tokens() + len(r.id) + len(r.dataset) + len(r.finishReason) + len(r.endpoint) + len(r.stopReason) + len(r.reply) + 64)
}

// shardInfo locates a shard in the log it was written from.
type shardInfo struct {
	// Log is the short ID of the topic incarnation (see logID), "" when the broker reports none.
	Log         string
	Topic       string
	Partition   int
	FirstOffset int64
	LastOffset  int64
}

// shardName returns the final file name of a shard: topic+partition+first-last+log.parquet, offsets
// zero-padded so names sort in offset order, log the topic incarnation (omitted when unknown). '+' cannot occur
// in a Kafka topic name.
func shardName(si shardInfo) string {
	name := fmt.Sprintf("%s+%d+%012d-%012d", si.Topic, si.Partition, si.FirstOffset, si.LastOffset)
	if si.Log != "" {
		name += "+" + si.Log
	}
	return name + ".parquet"
}

var shardNameRE = regexp.MustCompile(`^([A-Za-z0-9._-]+)\+([0-9]+)\+([0-9]+)-([0-9]+)(?:\+([0-9a-f]{1,32}))?\.parquet$`)

// parseShardName is the inverse of shardName.
func parseShardName(name string) (shardInfo, bool) {
	if isTemp(name) {
		return shardInfo{}, false
	}
	m := shardNameRE.FindStringSubmatch(name)
	if m == nil {
		return shardInfo{}, false
	}
	p, err1 := strconv.Atoi(m[2])
	f, err2 := strconv.ParseInt(m[3], 10, 64)
	l, err3 := strconv.ParseInt(m[4], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil || l < f {
		return shardInfo{}, false
	}
	return shardInfo{Log: m[5], Topic: m[1], Partition: p, FirstOffset: f, LastOffset: l}, true
}

// shardStats are the counts of a written shard.
type shardStats struct {
	Rows, Tokens, PromptTokens, CompletionTokens int64
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

// writeShard writes rows as one Parquet file to w, with the given key-value metadata.
func writeShard(w io.Writer, rows []*row, kv map[string]string, rowGroupRows, zstdLevel int) (shardStats, error) {
	parquetcodec.Register()
	var st shardStats
	keys, vals := make([]string, 0, len(kv)+1), make([]string, 0, len(kv)+1)
	for _, k := range sortedKeys(kv) {
		keys, vals = append(keys, k), append(vals, kv[k])
	}
	schema := arrow.NewSchema(shardSchema.Fields(), func() *arrow.Metadata { m := arrow.NewMetadata(keys, vals); return &m }())
	fw, err := pqarrow.NewFileWriter(schema, w, writerProps(rowGroupRows, zstdLevel), pqarrow.NewArrowWriterProperties(pqarrow.WithStoreSchema()))
	if err != nil {
		return st, err
	}
	b := array.NewRecordBuilder(memory.DefaultAllocator, schema)
	defer b.Release()
	ids := b.Field(colID).(*array.StringBuilder)
	inLB := b.Field(colInputIDs).(*array.ListBuilder)
	inVB := inLB.ValueBuilder().(*array.Int32Builder)
	maskLB := b.Field(colLossMask).(*array.ListBuilder)
	maskVB := maskLB.ValueBuilder().(*array.Uint8Builder)
	pl := b.Field(colPromptLen).(*array.Int32Builder)
	cl := b.Field(colCompletionLen).(*array.Int32Builder)
	fr := b.Field(colFinishReason).(*array.StringBuilder)
	ds := b.Field(colDataset).(*array.StringBuilder)
	tn := b.Field(colTurn).(*array.Int32Builder)
	ep := b.Field(colEndpoint).(*array.StringBuilder)
	sr := b.Field(colStopReason).(*array.StringBuilder)
	rp := b.Field(colReply).(*array.StringBuilder)

	zeros, ones := maskRuns(rows)
	for start := 0; start < len(rows); {
		end, toks := start, 0
		for end < len(rows) && end-start < rowGroupRows && (end == start || toks+rows[end].tokens() <= maxRowGroupTokens) {
			toks += rows[end].tokens()
			end++
		}
		inVB.Reserve(toks)
		maskVB.Reserve(toks)
		for _, r := range rows[start:end] {
			ids.Append(r.id)
			inLB.Append(true)
			inVB.AppendValues(asInt32(r.prompt), nil)
			inVB.AppendValues(asInt32(r.output), nil)
			maskLB.Append(true)
			if r.mask != nil {
				maskVB.AppendValues(r.mask, nil)
			} else {
				maskVB.AppendValues(zeros[:len(r.prompt)], nil)
				maskVB.AppendValues(ones[:len(r.output)], nil)
			}
			pl.Append(int32(len(r.prompt)))
			cl.Append(int32(len(r.output)))
			fr.Append(r.finishReason)
			ds.Append(r.dataset)
			tn.Append(r.turn)
			ep.Append(r.endpoint)
			sr.Append(r.stopReason)
			rp.Append(r.reply)
			st.Rows++
			st.PromptTokens += int64(len(r.prompt))
			st.CompletionTokens += int64(len(r.output))
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

// asInt32 reinterprets token ids as int32 without copying; callers reject ids above math.MaxInt32 first.
func asInt32(s []uint32) []int32 {
	if len(s) == 0 {
		return nil
	}
	return unsafe.Slice((*int32)(unsafe.Pointer(&s[0])), len(s))
}

// maskRuns returns a run of zeros and a run of ones at least as long as any prompt and output in rows, for
// building loss masks by slicing.
func maskRuns(rows []*row) (zeros, ones []uint8) {
	np, no := 0, 0
	for _, r := range rows {
		np, no = max(np, len(r.prompt)), max(no, len(r.output))
	}
	zeros, ones = make([]uint8, np), make([]uint8, no)
	for i := range ones {
		ones[i] = 1
	}
	return zeros, ones
}

// shardKV returns the key-value metadata of a shard (MetaRows and MetaTokens are added by writeShard).
func shardKV(run RunInfo, si shardInfo) map[string]string {
	runJSON, _ := json.Marshal(run)
	schemaJSON, _ := json.Marshal(Columns)
	return map[string]string{
		MetaFormat:      strconv.Itoa(FormatVersion),
		MetaSchema:      string(schemaJSON),
		MetaRun:         string(runJSON),
		MetaTopic:       si.Topic,
		MetaPartition:   strconv.Itoa(si.Partition),
		MetaFirstOffset: strconv.FormatInt(si.FirstOffset, 10),
		MetaLastOffset:  strconv.FormatInt(si.LastOffset, 10),
		MetaLog:         si.Log,
	}
}

// ShardRow is one row read back from a shard.
type ShardRow struct {
	ID            string
	InputIDs      []int32
	LossMask      []uint8
	PromptLen     int32
	CompletionLen int32
	FinishReason  string
	Dataset       string
	Turn          int32
	Endpoint      string
	StopReason    string
	Reply         string
}

// shardFile is an open shard.
type shardFile struct {
	f  *os.File
	pf *file.Reader
	fr *pqarrow.FileReader
	// ncols is the shard's column count: len(shardSchema.Fields()), or legacyColumns for older shards.
	ncols int
}

// openShard opens a shard and checks its schema.
func openShard(path string) (sf *shardFile, err error) {
	defer func() {
		// The Parquet reader panics on some corrupt input; a damaged shard is an error, not a crash.
		if p := recover(); p != nil {
			sf, err = nil, fmt.Errorf("%s: corrupt Parquet file: %v", path, p)
		}
	}()
	parquetcodec.Register()
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	pf, err := file.NewParquetReader(f)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: not a readable Parquet file: %w", path, err)
	}
	fr, err := pqarrow.NewFileReader(pf, pqarrow.ArrowReadProperties{BatchSize: 1024}, memory.DefaultAllocator)
	if err != nil {
		pf.Close()
		f.Close()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	sf = &shardFile{f: f, pf: pf, fr: fr}
	sc, err := fr.Schema()
	if err != nil {
		sf.Close()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if n := len(sc.Fields()); n != len(shardSchema.Fields()) && n != legacyColumns {
		sf.Close()
		return nil, fmt.Errorf("%s: schema has %d columns, want %d", path, len(sc.Fields()), len(shardSchema.Fields()))
	}
	sf.ncols = len(sc.Fields())
	for i, want := range shardSchema.Fields()[:sf.ncols] {
		got := sc.Field(i)
		if got.Name != want.Name || !sameType(got.Type, want.Type) {
			sf.Close()
			return nil, fmt.Errorf("%s: column %d is %s %s, want %s %s", path, i, got.Name, got.Type, want.Name, want.Type)
		}
	}
	return sf, nil
}

// sameType compares column types, ignoring list element names and nullability, which Parquet readers do not
// preserve.
func sameType(got, want arrow.DataType) bool {
	gl, ok1 := got.(*arrow.ListType)
	wl, ok2 := want.(*arrow.ListType)
	if ok1 && ok2 {
		return arrow.TypeEqual(gl.Elem(), wl.Elem())
	}
	return arrow.TypeEqual(got, want)
}

// Close closes the shard.
func (s *shardFile) Close() error {
	s.pf.Close()
	return s.f.Close()
}

// meta returns a key-value metadata value ("" if absent).
func (s *shardFile) meta(key string) string {
	if v := s.pf.MetaData().KeyValueMetadata().FindValue(key); v != nil {
		return *v
	}
	return ""
}

// numRows is the row count in the footer.
func (s *shardFile) numRows() int64 { return s.pf.NumRows() }

// scan calls fn for every row, reading only the given columns (nil: all); fields of unread columns are zero.
// The slices in a ShardRow are only valid during the call.
func (s *shardFile) scan(ctx context.Context, cols []int, fn func(*ShardRow) error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%s: corrupt Parquet data: %v", s.f.Name(), p)
		}
	}()
	if cols == nil {
		cols = make([]int, len(shardSchema.Fields()))
		for i := range cols {
			cols[i] = i
		}
	}
	// Columns a legacy shard does not have read as empty.
	cols = slices.DeleteFunc(slices.Clone(cols), func(c int) bool { return c >= s.ncols })
	rr, err := s.fr.GetRecordReader(ctx, cols, nil)
	if err != nil {
		return err
	}
	defer rr.Release()
	pos := make(map[int]int, len(cols))
	for i, c := range cols {
		pos[c] = i
	}
	var r ShardRow
	for rr.Next() {
		rec := rr.Record()
		col := func(c int) arrow.Array {
			if i, ok := pos[c]; ok {
				return rec.Column(i)
			}
			return nil
		}
		id, _ := col(colID).(*array.String)
		in, _ := col(colInputIDs).(*array.List)
		mask, _ := col(colLossMask).(*array.List)
		pl, _ := col(colPromptLen).(*array.Int32)
		cl, _ := col(colCompletionLen).(*array.Int32)
		fr, _ := col(colFinishReason).(*array.String)
		ds, _ := col(colDataset).(*array.String)
		tn, _ := col(colTurn).(*array.Int32)
		ep, _ := col(colEndpoint).(*array.String)
		sr, _ := col(colStopReason).(*array.String)
		rp, _ := col(colReply).(*array.String)
		var inVals []int32
		var maskVals []uint8
		if in != nil {
			inVals = in.ListValues().(*array.Int32).Int32Values()
		}
		if mask != nil {
			maskVals = mask.ListValues().(*array.Uint8).Uint8Values()
		}
		for i := 0; i < int(rec.NumRows()); i++ {
			r = ShardRow{}
			if id != nil {
				r.ID = id.Value(i)
			}
			if in != nil {
				a, b := in.ValueOffsets(i)
				r.InputIDs = inVals[a:b]
			}
			if mask != nil {
				a, b := mask.ValueOffsets(i)
				r.LossMask = maskVals[a:b]
			}
			if pl != nil {
				r.PromptLen = pl.Value(i)
			}
			if cl != nil {
				r.CompletionLen = cl.Value(i)
			}
			if fr != nil {
				r.FinishReason = fr.Value(i)
			}
			if ds != nil {
				r.Dataset = ds.Value(i)
			}
			if tn != nil {
				r.Turn = tn.Value(i)
			}
			if ep != nil {
				r.Endpoint = ep.Value(i)
			}
			if sr != nil {
				r.StopReason = sr.Value(i)
			}
			if rp != nil {
				r.Reply = rp.Value(i)
			}
			if err := fn(&r); err != nil {
				return err
			}
		}
	}
	if err := rr.Err(); err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	return nil
}

// checkTokenRange reports the first token id above math.MaxInt32, which an int32 column cannot hold.
func checkTokenRange(ids []uint32) (uint32, bool) {
	for _, id := range ids {
		if id > math.MaxInt32 {
			return id, false
		}
	}
	return 0, true
}
