package offline

import (
	"bytes"
	"encoding/binary"
	"strconv"
)

// npy1D encodes a one-dimensional array in NumPy's .npy format, version 1.0, byte for byte as numpy.save
// writes it: the magic "\x93NUMPY", version 1.0, a little-endian uint16 header length, then a Python dict
// literal ({'descr': ..., 'fortran_order': False, 'shape': (n,), }) padded with spaces and ended by a newline so
// that the data starts at a multiple of 64 bytes, then the data in C order. descr is '<i8' for int64 or '|b1'
// for bool, the dtypes torch.long and torch.bool become under .numpy().
func npy1D(descr string, n int, data []byte) []byte {
	header := "{'descr': '" + descr + "', 'fortran_order': False, 'shape': (" + strconv.Itoa(n) + ",), }"
	const pre = 10 // magic (6) + version (2) + header length (2)
	total := pre + len(header) + 1
	pad := (64 - total%64) % 64
	var b bytes.Buffer
	b.Grow(total + pad + len(data))
	b.WriteString("\x93NUMPY\x01\x00")
	binary.Write(&b, binary.LittleEndian, uint16(len(header)+pad+1))
	b.WriteString(header)
	b.Write(bytes.Repeat([]byte{' '}, pad))
	b.WriteByte('\n')
	b.Write(data)
	return b.Bytes()
}

// npyInt64 encodes v as a .npy array of dtype int64 ('<i8'), shape (len(v),).
func npyInt64(v []int64) []byte {
	data := make([]byte, 8*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint64(data[8*i:], uint64(x))
	}
	return npy1D("<i8", len(v), data)
}

// npyBool encodes v as a .npy array of dtype bool ('|b1'), shape (len(v),).
func npyBool(v []bool) []byte {
	data := make([]byte, len(v))
	for i, x := range v {
		if x {
			data[i] = 1
		}
	}
	return npy1D("|b1", len(v), data)
}
