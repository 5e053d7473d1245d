package checkpoint

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"math/bits"
	"os"
	"path/filepath"
	"slices"
)

// MaxHeaderSize bounds the JSON header of one shard. The safetensors library refuses headers over 100 MB;
// a K3 shard's header is about 1 MB, and even all 497,220 tensors in one file stay under 100 MB. The bound
// keeps a corrupt length field from making Open allocate gigabytes.
const MaxHeaderSize = 256 << 20

// Tensor locates one tensor's bytes on disk. Offset is absolute (the header's data_offsets are relative to
// the end of the header; this package adds that base once, here).
type Tensor struct {
	Name   string
	DType  DType
	Shape  []int64
	File   string // base name of the shard
	Offset int64  // absolute byte offset of the first element in File
	Size   int64  // bytes of data: product(Shape) * DType.Size()
}

// Spec returns the name, dtype and shape of t, the form Check compares against.
func (t Tensor) Spec() Spec { return Spec{Name: t.Name, DType: t.DType, Shape: t.Shape} }

// String renders t as `name [7168 576] BF16 @ file:offset+size`.
func (t Tensor) String() string {
	return fmt.Sprintf("%s @ %s:%d+%d", t.Spec(), t.File, t.Offset, t.Size)
}

// Header is the parsed and validated header of one safetensors shard.
type Header struct {
	File      string            // base name of the shard
	Size      int64             // file size in bytes
	DataStart int64             // absolute offset of the data section: 8 + header length
	Metadata  map[string]string // the optional __metadata__ object
	Tensors   []Tensor          // sorted by Offset; spans lie inside the file and do not overlap
}

// readHeader opens the shard at path and parses its header (ParseHeader). Open passes dupNames false
// because it finds duplicate names itself, across all shards, with the one map it needs for lookups
// anyway (a second map per shard costs 10% of Open).
func readHeader(path string, dupNames bool) (*Header, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	return parseHeader(filepath.Base(path), f, st.Size(), dupNames)
}

// ParseHeader reads and validates the header of a shard of size bytes. The format: an 8-byte little-endian
// header length N, N bytes of JSON mapping tensor names to {dtype, shape, data_offsets [begin, end)} (plus
// an optional "__metadata__" object of strings), then the data section; offsets count from its start.
// Every tensor must have a known dtype, a span exactly as long as its shape needs, inside the file, not
// overlapping another; names must be unique. Errors are *FileError wrapping ErrHeader.
func ParseHeader(file string, r io.ReaderAt, size int64) (*Header, error) {
	return parseHeader(file, r, size, true)
}

func parseHeader(file string, r io.ReaderAt, size int64, dupNames bool) (*Header, error) {
	bad := func(tensor, format string, args ...any) error {
		return &FileError{File: file, Tensor: tensor, Msg: fmt.Sprintf(format, args...), Kind: ErrHeader}
	}
	if size < 8 {
		return nil, bad("", "file of %d bytes is too short for the 8-byte header length", size)
	}
	var lenBuf [8]byte
	if _, err := r.ReadAt(lenBuf[:], 0); err != nil {
		return nil, bad("", "reading the header length: %v", err)
	}
	n := binary.LittleEndian.Uint64(lenBuf[:])
	switch {
	case n > MaxHeaderSize:
		return nil, bad("", "header length %d exceeds the limit of %d bytes", n, MaxHeaderSize)
	case n > uint64(size-8):
		return nil, bad("", "header length %d runs past the end of the file (%d bytes)", n, size)
	case n < 2:
		return nil, bad("", "header length %d is too short for a JSON object", n)
	}
	js := make([]byte, n)
	if got, err := r.ReadAt(js, 8); got < len(js) {
		return nil, bad("", "reading the %d-byte header: got %d bytes: %v", n, got, err)
	}
	h := &Header{File: file, Size: size, DataStart: 8 + int64(n)}
	if err := h.parse(js, dupNames); err != nil {
		var fe *FileError
		if errors.As(err, &fe) {
			return nil, err
		}
		return nil, bad("", "header %v", err)
	}
	return h, nil
}

// span is a tensor as the header JSON gives it, before validation. Names and dims are kept as ranges into
// two arenas, so a shard of 5,000 tensors costs a handful of allocations instead of 10,000.
type span struct {
	name, nameEnd   int // the name in the names arena
	shape, shapeEnd int // the dims in the dims arena
	dtype           DType
	begin, end      int64
	seen            uint8 // which of dtype, shape, data_offsets were present
}

const (
	seenDType = 1 << iota
	seenShape
	seenOffsets
	seenAll = seenDType | seenShape | seenOffsets
)

// parse reads the JSON, validates each tensor and the layout, and fills h.Tensors.
func (h *Header) parse(js []byte, dupNames bool) error {
	s := scanner{data: js}
	// Capacity hints: every tensor has one "data_offsets" key, so counting them (a fast byte search)
	// sizes the arenas and avoids regrowing them a dozen times on a large header.
	n := bytes.Count(js, []byte(`"data_offsets"`))
	var (
		spans = make([]span, 0, n)
		names = make([]byte, 0, len(js)/2) // arena: all names back to back, converted to one string at the end
		dims  = make([]int64, 0, 3*n)      // arena of all shape dimensions
	)
	err := s.object(func(key []byte) error {
		if string(key) == "__metadata__" {
			if h.Metadata != nil {
				return s.errorf("duplicate __metadata__")
			}
			h.Metadata = map[string]string{}
			return s.object(func(k []byte) error {
				k2 := string(k) // k lives in the scratch buffer that the value's str() may reuse
				v, err := s.str()
				if err != nil {
					return fmt.Errorf("__metadata__ value: %w", err)
				}
				h.Metadata[k2] = string(v)
				return nil
			})
		}
		sp := span{name: len(names)}
		names = append(names, key...)
		sp.nameEnd = len(names)
		if err := s.tensorEntry(&sp, &dims); err != nil {
			return &FileError{File: h.File, Tensor: string(names[sp.name:sp.nameEnd]), Msg: err.Error(), Kind: ErrHeader}
		}
		spans = append(spans, sp)
		return nil
	})
	if err == nil {
		err = s.end()
	}
	if err != nil {
		return err
	}
	arena := string(names)
	dims = slices.Clip(dims)
	h.Tensors = make([]Tensor, len(spans))
	for i, sp := range spans {
		name := arena[sp.name:sp.nameEnd]
		// A full slice expression: a caller appending to one shape must not clobber the next.
		shape := dims[sp.shape:sp.shapeEnd:sp.shapeEnd]
		if err := h.check(name, &sp, shape); err != nil {
			return err
		}
		h.Tensors[i] = Tensor{Name: name, DType: sp.dtype, Shape: shape, File: h.File,
			Offset: h.DataStart + sp.begin, Size: sp.end - sp.begin}
	}
	return h.checkLayout(dupNames)
}

// tensorEntry reads {"dtype": ..., "shape": [...], "data_offsets": [b, e]}; unknown fields are skipped.
func (s *scanner) tensorEntry(sp *span, dims *[]int64) error {
	return s.object(func(key []byte) error {
		var bit uint8
		switch string(key) {
		case "dtype":
			bit = seenDType
		case "shape":
			bit = seenShape
		case "data_offsets":
			bit = seenOffsets
		default:
			return s.skip(1)
		}
		// Checked before the value is read: key may live in the scratch buffer the value reuses.
		if sp.seen&bit != 0 {
			return fmt.Errorf("duplicate field %q", key)
		}
		sp.seen |= bit
		switch bit {
		case seenDType:
			v, err := s.str()
			if err != nil {
				return fmt.Errorf("dtype: %w", err)
			}
			sp.dtype = internDType(v)
		case seenShape:
			sp.shape = len(*dims)
			if err := s.array(func(int) error {
				d, err := s.uint()
				*dims = append(*dims, d)
				return err
			}); err != nil {
				return fmt.Errorf("shape: %w", err)
			}
			sp.shapeEnd = len(*dims)
		case seenOffsets:
			var offs [2]int64
			n := 0
			if err := s.array(func(i int) error {
				if i >= 2 {
					return s.errorf("more than 2 values")
				}
				v, err := s.uint()
				offs[i] = v
				n++
				return err
			}); err != nil {
				return fmt.Errorf("data_offsets: %w", err)
			}
			if n != 2 {
				return fmt.Errorf("data_offsets: %d values, want 2", n)
			}
			sp.begin, sp.end = offs[0], offs[1]
		}
		return nil
	})
}

// internDType returns the package constant for a known dtype spelling (no allocation per tensor), or a
// copy of v for an unknown one, which check then refuses.
func internDType(v []byte) DType {
	for _, d := range knownDTypes {
		if string(d) == string(v) {
			return d
		}
	}
	return DType(v)
}

// knownDTypes are the dtypes with a byte size. Sub-byte safetensors types (F4, F6_*) are not among them:
// K3 packs its MXFP4 nibbles into U8 tensors.
var knownDTypes = []DType{BF16, F32, U8, "F16", "F64", "I8", "I16", "I32", "I64", "U16", "U32", "U64",
	"BOOL", "F8_E4M3", "F8_E5M2", "F8_E8M0"}

// check validates one tensor on its own: fields present, dtype known, span size equal to what the shape
// needs (computed with overflow checks: dims come from the file), span inside the file.
func (h *Header) check(name string, sp *span, shape []int64) error {
	bad := func(format string, args ...any) error {
		return &FileError{File: h.File, Tensor: name, Msg: fmt.Sprintf(format, args...), Kind: ErrHeader}
	}
	if missing := seenAll &^ sp.seen; missing != 0 {
		for _, f := range []struct {
			bit  uint8
			name string
		}{{seenDType, "dtype"}, {seenShape, "shape"}, {seenOffsets, "data_offsets"}} {
			if missing&f.bit != 0 {
				return bad("missing field %q", f.name)
			}
		}
	}
	es := sp.dtype.Size()
	if es == 0 {
		return bad("unknown dtype %q", sp.dtype)
	}
	want, ok := uint64(es), true
	for _, d := range shape {
		var hi uint64
		hi, want = bits.Mul64(want, uint64(d))
		ok = ok && hi == 0 && want <= math.MaxInt64
	}
	if !ok {
		return bad("shape %s %s overflows int64 bytes", ShapeString(shape), sp.dtype)
	}
	if sp.end < sp.begin {
		return bad("data_offsets [%d %d] end before begin", sp.begin, sp.end)
	}
	if got := uint64(sp.end - sp.begin); got != want {
		return bad("data_offsets [%d %d] span %d bytes, shape %s %s needs %d",
			sp.begin, sp.end, got, ShapeString(shape), sp.dtype, want)
	}
	if sp.end > h.Size-h.DataStart {
		return bad("data_offsets [%d %d] end past file size %d (data section starts at byte %d)",
			sp.begin, sp.end, h.Size, h.DataStart)
	}
	return nil
}

// checkLayout sorts the tensors by offset and refuses overlapping spans and duplicate names. Gaps between
// spans are allowed (the format does not need them, but alignment padding is harmless).
func (h *Header) checkLayout(dupNames bool) error {
	slices.SortFunc(h.Tensors, func(a, b Tensor) int {
		if a.Offset != b.Offset {
			return cmp.Compare(a.Offset, b.Offset)
		}
		return cmp.Compare(a.Size, b.Size)
	})
	var seen map[string]struct{}
	if dupNames {
		seen = make(map[string]struct{}, len(h.Tensors))
	}
	for i, t := range h.Tensors {
		if dupNames {
			n := len(seen)
			if seen[t.Name] = struct{}{}; len(seen) == n {
				return &FileError{File: h.File, Tensor: t.Name, Msg: "appears twice in the header", Kind: ErrHeader}
			}
		}
		if i == 0 {
			continue
		}
		if p := h.Tensors[i-1]; p.Offset+p.Size > t.Offset {
			return &FileError{File: h.File, Tensor: t.Name, Kind: ErrHeader, Msg: fmt.Sprintf(
				"data_offsets [%d %d] overlap tensor %s [%d %d]", t.Offset-h.DataStart,
				t.Offset+t.Size-h.DataStart, p.Name, p.Offset-h.DataStart, p.Offset+p.Size-h.DataStart)}
		}
	}
	return nil
}
