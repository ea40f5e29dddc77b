// Command mkfeatures writes sample feature files through the real writer (shard/features), for the Python
// reader's tests: rows of seeded N(0, sigma) float32 values (sigma and magnitude vary by layer, some rows
// with NaN, infinities, zeros and ties), one file per codec, and the float32 values given as a .npy file per
// row.
//
//	go run ./shard/features/internal/mkfeatures -out DIR
package main

import (
	"encoding/binary"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"

	"github.com/draftflow/draftflow/shard/features"
)

func main() {
	out := flag.String("out", "", "output directory")
	flag.Parse()
	if *out == "" {
		fmt.Fprintln(os.Stderr, "mkfeatures: -out DIR is required")
		os.Exit(2)
	}
	if err := run(*out); err != nil {
		fmt.Fprintln(os.Stderr, "mkfeatures:", err)
		os.Exit(1)
	}
}

func run(out string) error {
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	const hidden = 16
	layers := []string{"aux:1", "aux:3", "aux:4", "final"}
	rng := rand.New(rand.NewPCG(25, 3))
	type row struct {
		ID     string `json:"id"`
		Tokens int    `json:"tokens"`
		vals   []float32
	}
	var rows []row
	for i, tokens := range []int{1, 3, 17, 64} {
		vals := make([]float32, tokens*hidden*len(layers))
		for j := range vals {
			layer := (j / hidden) % len(layers)
			vals[j] = float32(rng.NormFloat64() * math.Pow(10, float64(layer-2)))
		}
		if i == 2 {
			copy(vals, []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1)), 0,
				float32(math.Copysign(0, -1)), math.Float32frombits(0x3f808000), math.Float32frombits(0x3f818000), 1e-40})
		}
		rows = append(rows, row{ID: fmt.Sprintf("conv-%d#%d", i, i%2), Tokens: tokens, vals: vals})
	}
	for _, codec := range []string{features.CodecZstd, features.CodecRaw} {
		w, err := features.Create(filepath.Join(out, codec+".dff"), features.Header{Hidden: hidden, Layers: layers, Codec: codec})
		if err != nil {
			return err
		}
		for _, r := range rows {
			if err := w.AddFloat32(r.ID, r.Tokens, r.vals); err != nil {
				w.Abort()
				return err
			}
		}
		if err := w.Close(); err != nil {
			return err
		}
	}
	for i, r := range rows {
		if err := writeNpy(filepath.Join(out, fmt.Sprintf("row%d.npy", i)), r.vals, r.Tokens, hidden*len(layers)); err != nil {
			return err
		}
	}
	data, err := json.Marshal(map[string]any{"hidden": hidden, "layers": layers, "rows": rows})
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(out, "expected.json"), data, 0o644)
}

// writeNpy writes a float32 [rows, cols] array in NumPy's .npy format (version 1.0).
func writeNpy(path string, vals []float32, rows, cols int) error {
	header := fmt.Sprintf("{'descr': '<f4', 'fortran_order': False, 'shape': (%d, %d), }", rows, cols)
	pad := 64 - (10+len(header)+1)%64
	for i := 0; i < pad%64; i++ {
		header += " "
	}
	header += "\n"
	buf := []byte("\x93NUMPY\x01\x00")
	buf = binary.LittleEndian.AppendUint16(buf, uint16(len(header)))
	buf = append(buf, header...)
	for _, v := range vals {
		buf = binary.LittleEndian.AppendUint32(buf, math.Float32bits(v))
	}
	return os.WriteFile(path, buf, 0o644)
}
