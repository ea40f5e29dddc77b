package ingest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/draftflow/draftflow/internal/parquetcodec"
	"io"
	"os"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/array"
	"github.com/apache/arrow/go/v17/arrow/memory"
	"github.com/apache/arrow/go/v17/parquet/file"
	"github.com/apache/arrow/go/v17/parquet/pqarrow"

	"github.com/draftflow/draftflow/topics"
)

// parquetBatchRows is how many rows are decoded at a time; conversations can be long, so keep it modest.
const parquetBatchRows = 256

// parquetColumns are the top-level columns ingest reads; any others are never decoded.
var parquetColumns = rowKeys

// readParquet streams the rows of a Parquet file. Each row's columns of either shape (a conversation's id,
// messages/conversations and tools; a row of token ids' input_ids, output_ids or loss_mask and the rest of
// tokenKeys) are turned into the JSON object a JSONL line would hold and go through ParseRows, so both formats
// share one set of rules. messages and tools may be nested (list<struct>) or JSON strings.
func readParquet(ctx context.Context, path string, f *os.File, opt readOptions, fn RecordFunc) (err error) {
	var row int64
	defer func() {
		// arrow's readers panic on some corrupt files (an index out of range in a damaged page): the file is
		// unreadable from here on, not the stage broken. A panic of fn (the stage's own code) is not caught.
		if p := recover(); p != nil {
			if _, ours := p.(callbackPanic); ours {
				panic(p.(callbackPanic).v)
			}
			err = fileErr(path, row+1, ReasonCorruptFile, "corrupt Parquet data after row %d: %v", row, p)
		}
	}()
	call := func(p topics.Prompt, perr error, src topics.Source, raw []byte) (err error) {
		defer func() {
			if v := recover(); v != nil {
				panic(callbackPanic{v})
			}
		}()
		return fn(p, perr, src, raw)
	}
	parquetcodec.Register()
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("ingest: %w", err)
	}
	pf, err := file.NewParquetReader(f)
	if err != nil {
		return fileErr(path, 1, ReasonCorruptFile, "not a readable Parquet file: %v", err)
	}
	defer pf.Close()
	fr, err := pqarrow.NewFileReader(pf, pqarrow.ArrowReadProperties{BatchSize: parquetBatchRows}, memory.DefaultAllocator)
	if err != nil {
		return fileErr(path, 1, ReasonCorruptFile, "unreadable Parquet schema: %v", err)
	}
	var leaves []int
	var names, unknown []string
	hasConv := false
	for i := range fr.Manifest.Fields {
		name := fr.Manifest.Fields[i].Field.Name
		names = append(names, name)
		if !slices.Contains(parquetColumns, name) {
			unknown = append(unknown, name)
			continue
		}
		leaves = appendLeaves(leaves, &fr.Manifest.Fields[i])
		hasConv = hasConv || name == "messages" || name == "conversations" || name == "input_ids"
	}
	if !hasConv {
		return fileErr(path, 1, ReasonWrongSchema, "no \"messages\", \"conversations\" or \"input_ids\" column (columns: %s)", strings.Join(names, ", "))
	}
	if len(unknown) > 0 && opt.unknownKeys != nil {
		slices.Sort(unknown)
		opt.unknownKeys(opt.dataset, unknown, topics.Source{File: path, Line: 1})
	}
	if err := checkPages(pf, leaves); err != nil {
		return fileErr(path, 1, ReasonCorruptFile, "corrupt Parquet page: %v", err)
	}
	rr, err := fr.GetRecordReader(ctx, leaves, nil)
	if err != nil {
		return fileErr(path, 1, ReasonCorruptFile, "unreadable Parquet columns: %v", err)
	}
	defer rr.Release()

	total := pf.NumRows()
	var reported int64
	for rr.Next() {
		rec := rr.Record()
		cols := map[string]arrow.Array{}
		for i, fld := range rec.Schema().Fields() {
			cols[fld.Name] = rec.Column(i)
		}
		for i := 0; i < int(rec.NumRows()); i++ {
			if err := ctx.Err(); err != nil {
				return err
			}
			row++
			src := topics.Source{File: path, Line: row}
			raw, cerr := rowJSON(cols, i)
			var ps []topics.Prompt
			var perr error
			if cerr != nil {
				perr = cerr
			} else {
				ps, perr = ParseRows(path, row, raw, opt.dataset)
			}
			if err := each(call, ps, perr, src, raw); err != nil {
				return err
			}
		}
		if opt.progress != nil && total > 0 {
			done := st.Size() * row / total
			opt.progress(done - reported)
			reported = done
		}
	}
	if err := rr.Err(); err != nil && !errors.Is(err, io.EOF) {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fileErr(path, row+1, ReasonCorruptFile, "corrupt Parquet data after row %d: %v", row, err)
	}
	return nil
}

// checkPages reads every page of the given leaf columns once, here, before arrow's record reader does. arrow
// decodes page headers and decompresses pages in goroutines of its own, where a corrupt file's panic (a nil
// header, an index out of range: found by FuzzReadParquet) would kill the process; in this goroutine
// readParquet's recover turns it into a FileError. It costs one more decompression of each page. Values that
// decompress but decode to nonsense are still read by arrow's goroutines; the fuzz target has found no panic
// there yet.
func checkPages(pf *file.Reader, leaves []int) error {
	for g := range pf.NumRowGroups() {
		rg := pf.RowGroup(g)
		for _, col := range leaves {
			pr, err := rg.GetColumnPageReader(col)
			if err != nil {
				return fmt.Errorf("row group %d column %d: %w", g, col, err)
			}
			for pr.Next() {
			}
			if err := pr.Err(); err != nil {
				return fmt.Errorf("row group %d column %d: %w", g, col, err)
			}
		}
	}
	return nil
}

// callbackPanic carries a panic of readParquet's callback through its recover, which is for arrow's panics.
type callbackPanic struct{ v any }

// appendLeaves appends the Parquet leaf column indices under f. (Only fields without children are leaves:
// the manifest leaves ColIndex at 0, not -1, on some group fields.)
func appendLeaves(out []int, f *pqarrow.SchemaField) []int {
	if len(f.Children) == 0 {
		return append(out, f.ColIndex)
	}
	for i := range f.Children {
		out = appendLeaves(out, &f.Children[i])
	}
	return out
}

// rowJSON encodes row i of the ingest columns as a JSON object.
func rowJSON(cols map[string]arrow.Array, i int) ([]byte, error) {
	obj := make(map[string]any, len(cols))
	for name, col := range cols {
		v, err := arrowValue(col, i, name)
		if err != nil {
			return nil, err
		}
		if v != nil {
			obj[name] = v
		}
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(obj); err != nil {
		return nil, lineErr(ReasonBadField, "row cannot be encoded as JSON: %v", err)
	}
	return bytes.TrimRight(buf.Bytes(), "\n"), nil
}

// arrowValue converts one value of an Arrow array to plain Go values (string, numbers, bool, []any,
// map[string]any, nil) for JSON encoding. Strings must be valid UTF-8: encoding/json would silently replace
// bad bytes, hiding exactly the corruption the stage is meant to reject.
func arrowValue(arr arrow.Array, i int, where string) (any, error) {
	if arr.IsNull(i) {
		return nil, nil
	}
	switch a := arr.(type) {
	case array.StringLike:
		s := a.Value(i)
		if !utf8.ValidString(s) {
			return nil, lineErr(ReasonInvalidUTF8, "invalid UTF-8 in column %s at byte %d", where, invalidUTF8Offset([]byte(s)))
		}
		return s, nil
	case *array.Binary:
		return binaryString(a.Value(i), where)
	case *array.LargeBinary:
		return binaryString(a.Value(i), where)
	case *array.Dictionary:
		return arrowValue(a.Dictionary(), a.GetValueIndex(i), where)
	case *array.Map:
		keys, items := a.Keys(), a.Items()
		start, end := a.ValueOffsets(i)
		m := make(map[string]any, end-start)
		for j := int(start); j < int(end); j++ {
			k, err := arrowValue(keys, j, where+".key")
			if err != nil {
				return nil, err
			}
			v, err := arrowValue(items, j, where+"."+fmt.Sprint(k))
			if err != nil {
				return nil, err
			}
			m[fmt.Sprint(k)] = v
		}
		return m, nil
	case array.ListLike:
		vals := a.ListValues()
		start, end := a.ValueOffsets(i)
		out := make([]any, 0, end-start)
		for j := int(start); j < int(end); j++ {
			v, err := arrowValue(vals, j, fmt.Sprintf("%s[%d]", where, j-int(start)))
			if err != nil {
				return nil, err
			}
			out = append(out, v)
		}
		return out, nil
	case *array.Struct:
		st := a.DataType().(*arrow.StructType)
		m := make(map[string]any, a.NumField())
		for f := 0; f < a.NumField(); f++ {
			name := st.Field(f).Name
			v, err := arrowValue(a.Field(f), i, where+"."+name)
			if err != nil {
				return nil, err
			}
			if v != nil {
				m[name] = v
			}
		}
		return m, nil
	}
	return arr.GetOneForMarshal(i), nil
}

func binaryString(b []byte, where string) (any, error) {
	if !utf8.Valid(b) {
		return nil, lineErr(ReasonInvalidUTF8, "invalid UTF-8 in column %s at byte %d", where, invalidUTF8Offset(b))
	}
	return string(b), nil
}
