package shard

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/array"
	"github.com/apache/arrow/go/v17/arrow/memory"
	"github.com/apache/arrow/go/v17/parquet/file"
	"github.com/apache/arrow/go/v17/parquet/pqarrow"

	"github.com/draftflow/draftflow/internal/parquetcodec"
	"github.com/draftflow/draftflow/topics"
)

// Row is one row read back from a shard.
type Row struct {
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
	// Origin is where the output came from (topics.Origins); topics.OriginGenerated in shards written before
	// the column existed.
	Origin string
}

// Validate returns what is wrong with a row's token columns: an empty id, negative lengths, input_ids and
// loss_mask of different lengths or not prompt_len + completion_len long, or a loss mask that is not 0 before
// prompt_len and 1 after; and an origin that is not one of topics.Origins (when read). In a merged run
// (Manifest.Merged) the prompt part of the loss mask may hold the earlier turns' ones.
func (r *Row) Validate(merged bool) error {
	switch {
	case r.ID == "":
		return errors.New("empty id")
	case !topics.KnownOrigin(r.Origin):
		return fmt.Errorf("unknown origin %q", r.Origin)
	case r.PromptLen < 0 || r.CompletionLen < 0:
		return fmt.Errorf("negative lengths %d/%d", r.PromptLen, r.CompletionLen)
	case len(r.LossMask) != len(r.InputIDs):
		return fmt.Errorf("loss_mask has %d entries, input_ids %d", len(r.LossMask), len(r.InputIDs))
	case int64(len(r.InputIDs)) != int64(r.PromptLen)+int64(r.CompletionLen):
		return fmt.Errorf("input_ids has %d entries, prompt_len+completion_len = %d", len(r.InputIDs), int64(r.PromptLen)+int64(r.CompletionLen))
	}
	for i, v := range r.LossMask {
		want := uint8(0)
		if i >= int(r.PromptLen) {
			want = 1
		}
		if merged && want == 0 && v == 1 {
			continue
		}
		if v != want {
			return fmt.Errorf("loss_mask[%d] = %d, want %d (prompt_len %d)", i, v, want, r.PromptLen)
		}
	}
	return nil
}

// File is an open shard.
type File struct {
	f  *os.File
	pf *file.Reader
	fr *pqarrow.FileReader
	// ncols is the shard's column count: len(schema.Fields()), or fewer for older shards (readableColumns).
	ncols int
}

// Open opens a shard and checks its schema.
func Open(path string) (sf *File, err error) {
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
	sf = &File{f: f, pf: pf, fr: fr}
	sc, err := fr.Schema()
	if err != nil {
		sf.Close()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if n := len(sc.Fields()); !slices.Contains(readableColumns, n) {
		sf.Close()
		return nil, fmt.Errorf("%s: schema has %d columns, want %d", path, len(sc.Fields()), len(schema.Fields()))
	}
	sf.ncols = len(sc.Fields())
	for i, want := range schema.Fields()[:sf.ncols] {
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
func (s *File) Close() error {
	s.pf.Close()
	return s.f.Close()
}

// Meta returns a key-value metadata value ("" if absent).
func (s *File) Meta(key string) string {
	if v := s.pf.MetaData().KeyValueMetadata().FindValue(key); v != nil {
		return *v
	}
	return ""
}

// NumRows is the row count in the footer.
func (s *File) NumRows() int64 { return s.pf.NumRows() }

// Scan calls fn for every row, reading only the given columns (nil: all); fields of unread columns are zero.
// A column an older shard does not have reads as empty, origin as topics.OriginGenerated. The Row and its
// slices are only valid during the call. Once ctx ends it stops, with ctx's error, before the next batch of
// rows.
func (s *File) Scan(ctx context.Context, cols []Col, fn func(*Row) error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%s: corrupt Parquet data: %v", s.f.Name(), p)
		}
	}()
	if cols == nil {
		for c := range len(schema.Fields()) {
			cols = append(cols, Col(c))
		}
	}
	// Columns an older shard does not have read as empty, its rows' origin as generated.
	oldOrigin := slices.Contains(cols, ColOrigin) && int(ColOrigin) >= s.ncols
	cols = slices.DeleteFunc(slices.Clone(cols), func(c Col) bool { return int(c) >= s.ncols })
	leaves := make([]int, len(cols))
	for i, c := range cols {
		leaves[i] = int(c)
	}
	rr, err := s.fr.GetRecordReader(ctx, leaves, nil)
	if err != nil {
		return err
	}
	defer rr.Release()
	var r Row
	for rr.Next() {
		if err := ctx.Err(); err != nil {
			return err
		}
		rec := rr.Record()
		b := batchOf(rec, cols)
		for i := 0; i < int(rec.NumRows()); i++ {
			b.row(i, &r)
			if oldOrigin {
				r.Origin = topics.OriginGenerated
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

// batch is the columns of one record batch that a scan reads; the others are nil.
type batch struct {
	id, fr, ds, ep, sr, rp *array.String
	orig                   *array.String
	in, mask               *array.List
	pl, cl, tn             *array.Int32
	inVals                 []int32
	maskVals               []uint8
}

// batchOf picks the columns cols (in that order in rec) out of rec.
func batchOf(rec arrow.Record, cols []Col) *batch {
	col := func(c Col) arrow.Array {
		if i := slices.Index(cols, c); i >= 0 {
			return rec.Column(i)
		}
		return nil
	}
	b := &batch{}
	b.id, _ = col(ColID).(*array.String)
	b.in, _ = col(ColInputIDs).(*array.List)
	b.mask, _ = col(ColLossMask).(*array.List)
	b.pl, _ = col(ColPromptLen).(*array.Int32)
	b.cl, _ = col(ColCompletionLen).(*array.Int32)
	b.fr, _ = col(ColFinishReason).(*array.String)
	b.ds, _ = col(ColDataset).(*array.String)
	b.tn, _ = col(ColTurn).(*array.Int32)
	b.ep, _ = col(ColEndpoint).(*array.String)
	b.sr, _ = col(ColStopReason).(*array.String)
	b.rp, _ = col(ColReply).(*array.String)
	b.orig, _ = col(ColOrigin).(*array.String)
	if b.in != nil {
		b.inVals = b.in.ListValues().(*array.Int32).Int32Values()
	}
	if b.mask != nil {
		b.maskVals = b.mask.ListValues().(*array.Uint8).Uint8Values()
	}
	return b
}

// row sets r to row i of the batch.
func (b *batch) row(i int, r *Row) {
	*r = Row{}
	if b.id != nil {
		r.ID = b.id.Value(i)
	}
	if b.in != nil {
		lo, hi := b.in.ValueOffsets(i)
		r.InputIDs = b.inVals[lo:hi]
	}
	if b.mask != nil {
		lo, hi := b.mask.ValueOffsets(i)
		r.LossMask = b.maskVals[lo:hi]
	}
	if b.pl != nil {
		r.PromptLen = b.pl.Value(i)
	}
	if b.cl != nil {
		r.CompletionLen = b.cl.Value(i)
	}
	if b.fr != nil {
		r.FinishReason = b.fr.Value(i)
	}
	if b.ds != nil {
		r.Dataset = b.ds.Value(i)
	}
	if b.tn != nil {
		r.Turn = b.tn.Value(i)
	}
	if b.ep != nil {
		r.Endpoint = b.ep.Value(i)
	}
	if b.sr != nil {
		r.StopReason = b.sr.Value(i)
	}
	if b.rp != nil {
		r.Reply = b.rp.Value(i)
	}
	if b.orig != nil {
		r.Origin = b.orig.Value(i)
	}
}
