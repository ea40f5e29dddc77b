package topics

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
)

// Wire format. Every record value on every topic is:
//
//	byte 0      magic 0xDF
//	byte 1      format version (1 or 2)
//	byte 2      record kind (1 Prompt, 2 Tokenized, 3 Generation, 4 Rejection, 5 Status, 6 ShardsEpoch,
//	            7 ShardedTurn, 8 ShardFile)
//	uvarint n   length of the JSON header
//	n bytes     JSON header: every field of the record except token arrays
//	then, for each token array of the kind in that version, in order:
//	  uvarint k   number of tokens
//	  4k bytes    the token ids, little-endian uint32
//
// The versions differ only in the token arrays a kind has:
//
//	version 1   Tokenized: InputIDs; Generation: PromptIDs, OutputIDs; the other kinds none
//	version 2   Prompt: InputIDs, OutputIDs; Tokenized: InputIDs, OutputIDs; Generation: PromptIDs, OutputIDs;
//	            the other kinds none
//
// Marshal writes the lowest version that holds the record: version 1 unless a Prompt carries token ids or a
// Tokenized a kept output (rows brought in with their output), so a build that reads only version 1 reads every
// other record. Unmarshal reads both. Nothing may follow the last array. A decoder rejects an unknown magic,
// version or kind, a kind other than the one asked for, truncated input and trailing bytes, each with a
// *DecodeError saying which. Unknown JSON fields are ignored, so fields can be added to the header without a
// version bump; changing the arrays above needs one.
const (
	// Magic is the first byte of every encoded record.
	Magic byte = 0xDF
	// Version is the newest wire format version: this package reads versions 1 to Version and writes the
	// lowest that holds a record.
	Version byte = 2
)

// Kind identifies the record type in an encoded value.
type Kind byte

// Record kinds.
const (
	KindPrompt     Kind = 1
	KindTokenized  Kind = 2
	KindGeneration Kind = 3
	KindRejection  Kind = 4
	KindStatus     Kind = 5
	// KindShardsEpoch and KindShardedTurn are the records of TopicShards.
	KindShardsEpoch Kind = 6
	KindShardedTurn Kind = 7
	// KindShardFile is the record of TopicShardFiles.
	KindShardFile Kind = 8
)

func (k Kind) String() string {
	switch k {
	case KindPrompt:
		return "prompt"
	case KindTokenized:
		return "tokenized"
	case KindGeneration:
		return "generation"
	case KindRejection:
		return "rejection"
	case KindStatus:
		return "status"
	case KindShardsEpoch:
		return "shards epoch"
	case KindShardedTurn:
		return "sharded turn"
	case KindShardFile:
		return "shard file"
	}
	return fmt.Sprintf("kind(%d)", byte(k))
}

// maxTokens bounds a token array on decode so corrupt input cannot make us allocate gigabytes.
const maxTokens = 1 << 24

// DecodeError reports why a value could not be decoded.
type DecodeError struct {
	// Reason says what was wrong, for example "unknown format version 7".
	Reason string
	// Err is the underlying error, if any (a JSON syntax error, for example).
	Err error
}

func (e *DecodeError) Error() string {
	if e.Err != nil {
		return "decode record: " + e.Reason + ": " + e.Err.Error()
	}
	return "decode record: " + e.Reason
}

func (e *DecodeError) Unwrap() error { return e.Err }

// ErrUnknownVersion is wrapped by the DecodeError of a value written in a format version this build does not read.
var ErrUnknownVersion = errors.New("unknown format version")

// Marshal encodes a *Prompt, *Tokenized, *Generation, *Rejection, *Status, *ShardsEpoch, *ShardedTurn or *ShardFile
// in the wire format, in the lowest version that holds it.
func Marshal(v any) ([]byte, error) {
	var kind Kind
	version := byte(1)
	switch r := v.(type) {
	case *Prompt:
		kind = KindPrompt
		if len(r.InputIDs) > 0 || len(r.OutputIDs) > 0 {
			version = 2
		}
	case *Tokenized:
		kind = KindTokenized
		if len(r.OutputIDs) > 0 {
			version = 2
		}
	case *Generation:
		kind = KindGeneration
	case *Rejection:
		kind = KindRejection
		if len(r.Payload) > MaxRejectedPayload {
			c := *r
			c.Payload = c.Payload[:MaxRejectedPayload]
			v = &c
		}
	case *Status:
		kind = KindStatus
	case *ShardsEpoch:
		kind = KindShardsEpoch
	case *ShardedTurn:
		kind = KindShardedTurn
	case *ShardFile:
		kind = KindShardFile
	default:
		return nil, fmt.Errorf("topics.Marshal: unsupported type %T", v)
	}
	header, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("topics.Marshal %s: %w", kind, err)
	}
	arrays := tokenArrays(v, version)
	size := 3 + binary.MaxVarintLen64 + len(header)
	for _, a := range arrays {
		size += binary.MaxVarintLen64 + 4*len(*a)
	}
	buf := make([]byte, 0, size)
	buf = append(buf, Magic, version, byte(kind))
	buf = binary.AppendUvarint(buf, uint64(len(header)))
	buf = append(buf, header...)
	for _, a := range arrays {
		buf = binary.AppendUvarint(buf, uint64(len(*a)))
		for _, id := range *a {
			buf = binary.LittleEndian.AppendUint32(buf, id)
		}
	}
	return buf, nil
}

// tokenArrays returns the token arrays of record v in wire format version, in their order on the wire.
func tokenArrays(v any, version byte) []*[]uint32 {
	switch r := v.(type) {
	case *Prompt:
		if version >= 2 {
			return []*[]uint32{&r.InputIDs, &r.OutputIDs}
		}
	case *Tokenized:
		if version >= 2 {
			return []*[]uint32{&r.InputIDs, &r.OutputIDs}
		}
		return []*[]uint32{&r.InputIDs}
	case *Generation:
		return []*[]uint32{&r.PromptIDs, &r.OutputIDs}
	}
	return nil
}

// PeekKind returns the kind of an encoded value after checking its magic and version (1 to Version).
func PeekKind(data []byte) (Kind, error) {
	if len(data) < 3 {
		return 0, &DecodeError{Reason: fmt.Sprintf("value too short (%d bytes)", len(data))}
	}
	if data[0] != Magic {
		return 0, &DecodeError{Reason: fmt.Sprintf("bad magic byte 0x%02x (not a draftflow record)", data[0])}
	}
	if data[1] < 1 || data[1] > Version {
		return 0, &DecodeError{Reason: fmt.Sprintf("format version %d, this build reads 1 to %d", data[1], Version), Err: ErrUnknownVersion}
	}
	k := Kind(data[2])
	if k < KindPrompt || k > KindShardFile {
		return 0, &DecodeError{Reason: fmt.Sprintf("unknown record kind %d", data[2])}
	}
	return k, nil
}

// Unmarshal decodes data into a *Prompt, *Tokenized, *Generation, *Rejection, *Status, *ShardsEpoch,
// *ShardedTurn or *ShardFile; the encoded kind must match v.
func Unmarshal(data []byte, v any) error {
	var want Kind
	switch v.(type) {
	case *Prompt:
		want = KindPrompt
	case *Tokenized:
		want = KindTokenized
	case *Generation:
		want = KindGeneration
	case *Rejection:
		want = KindRejection
	case *Status:
		want = KindStatus
	case *ShardsEpoch:
		want = KindShardsEpoch
	case *ShardedTurn:
		want = KindShardedTurn
	case *ShardFile:
		want = KindShardFile
	default:
		return fmt.Errorf("topics.Unmarshal: unsupported type %T", v)
	}
	got, err := PeekKind(data)
	if err != nil {
		return err
	}
	if got != want {
		return &DecodeError{Reason: fmt.Sprintf("record is a %s, expected a %s", got, want)}
	}
	rest := data[3:]
	n, w := binary.Uvarint(rest)
	if w <= 0 || n > uint64(len(rest)-w) {
		return &DecodeError{Reason: "truncated header"}
	}
	header := rest[w : w+int(n)]
	rest = rest[w+int(n):]
	dec := json.NewDecoder(bytes.NewReader(header))
	if err := dec.Decode(v); err != nil {
		return &DecodeError{Reason: fmt.Sprintf("bad %s header", want), Err: err}
	}
	if dec.More() {
		return &DecodeError{Reason: fmt.Sprintf("bad %s header: trailing data", want)}
	}
	for i, dst := range tokenArrays(v, data[1]) {
		k, w := binary.Uvarint(rest)
		if w <= 0 {
			return &DecodeError{Reason: fmt.Sprintf("truncated token array %d", i)}
		}
		rest = rest[w:]
		if k > maxTokens || k*4 > uint64(len(rest)) {
			return &DecodeError{Reason: fmt.Sprintf("token array %d claims %d tokens, %d bytes left", i, k, len(rest))}
		}
		ids := make([]uint32, k)
		for j := range ids {
			ids[j] = binary.LittleEndian.Uint32(rest[4*j:])
		}
		*dst = ids
		rest = rest[4*k:]
	}
	if len(rest) != 0 {
		return &DecodeError{Reason: fmt.Sprintf("%d trailing bytes after the %s", len(rest), want)}
	}
	return nil
}
