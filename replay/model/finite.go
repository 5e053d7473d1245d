package model

import (
	"encoding/binary"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/potato-k3/potato-k3/replay/checkpoint"
)

// NonFiniteError reports a NaN or Inf element in a BF16 or F32 weight. A trained checkpoint has none; one
// would silently poison every token downstream of it, so it is refused at load with the tensor named.
type NonFiniteError struct {
	Index int // the first non-finite element, counted in elements of the tensor's dtype
}

func (e *NonFiniteError) Error() string {
	return fmt.Sprintf("element %d is NaN or Inf: a damaged or wrongly converted checkpoint", e.Index)
}

// CheckFinite returns a *NonFiniteError naming the first NaN or Inf element of little-endian BF16 or F32
// bytes, or nil (always nil for other dtypes: MXFP4 codes are always finite, and their scales are checked
// when decoded). Large tensors are scanned on all CPUs; the answer is the same.
func CheckFinite(dt checkpoint.DType, raw []byte) error {
	if i := firstNonFinite(dt, raw); i >= 0 {
		return &NonFiniteError{Index: i}
	}
	return nil
}

// Prechecked is implemented by a Source whose Read has already checked every BF16 and F32 tensor it
// returns with CheckFinite (returning the *NonFiniteError instead of the bytes), so the loader does not
// scan them again. The engine's read-ahead does that in the background while the previous layer
// computes, which takes the scan off the layer's critical path.
type Prechecked interface {
	Source
	// FiniteChecked is a marker: it only says that Read checks.
	FiniteChecked()
}

// Scanning parameters: tensors of at least parallelScan bytes are split into chunks of scanChunk bytes
// scanned by GOMAXPROCS goroutines (a chunk is large enough that starting it costs nothing in comparison).
const (
	parallelScan = 4 << 20
	scanChunk    = 1 << 20 // a multiple of 8, so that chunks hold whole elements of either dtype
)

// firstNonFinite returns the index of the first NaN or Inf element of little-endian BF16 or F32 bytes, or
// -1 (and -1 for any other dtype). A trailing partial element is ignored. It computes
//
//	for i := 0; i+size <= len(raw); i += size {
//		if exponent bits of element i/size are all ones { return i / size }
//	}
//
// eight bytes at a time, over chunks in parallel for large tensors.
func firstNonFinite(dt checkpoint.DType, raw []byte) int {
	var scan func([]byte) int
	size := 0
	switch dt {
	case checkpoint.BF16:
		scan, size = scanBF16, 2
	case checkpoint.F32:
		scan, size = scanF32, 4
	default:
		return -1
	}
	raw = raw[:len(raw)/size*size]
	if len(raw) < parallelScan {
		return scan(raw)
	}
	chunks := (len(raw) + scanChunk - 1) / scanChunk
	var (
		next  atomic.Int64
		first atomic.Int64 // the lowest chunk with a hit so far; chunks after it need not be scanned
		mu    sync.Mutex
		hits  = map[int]int{} // chunk -> element index of its first hit
		wg    sync.WaitGroup
	)
	first.Store(int64(chunks))
	for range min(runtime.GOMAXPROCS(0), chunks) {
		wg.Go(func() {
			for {
				c := int(next.Add(1) - 1)
				if c >= chunks || int64(c) > first.Load() {
					return
				}
				lo := c * scanChunk
				if i := scan(raw[lo:min(lo+scanChunk, len(raw))]); i >= 0 {
					mu.Lock()
					hits[c] = lo/size + i
					mu.Unlock()
					for f := first.Load(); int64(c) < f && !first.CompareAndSwap(f, int64(c)); f = first.Load() {
					}
				}
			}
		})
	}
	wg.Wait()
	if c := int(first.Load()); c < chunks {
		return hits[c]
	}
	return -1
}

// Lane masks of the word-wise scans. In a word masked to the exponent bits and XORed with them, an element
// whose exponent is all ones (NaN or Inf) is a zero lane; every lane is at most its exponent mask, so
// adding the lane's maximum positive value sets each lane's top bit exactly when the lane is non-zero,
// with no carry into the next lane.
const (
	bf16Exp  = 0x7f807f807f807f80
	bf16Add  = 0x7fff7fff7fff7fff
	bf16Tops = 0x8000800080008000
	f32Exp   = 0x7f8000007f800000
	f32Add   = 0x7fffffff7fffffff
	f32Tops  = 0x8000000080000000
)

// finiteWords reports whether every lane of the four words is finite: each word's lanes all keep their top
// bit, so the AND of the four keeps them all.
func finiteWords(raw []byte, exp, add, tops uint64) bool {
	le := binary.LittleEndian
	t := ((le.Uint64(raw)&exp ^ exp) + add) & ((le.Uint64(raw[8:])&exp ^ exp) + add) &
		((le.Uint64(raw[16:])&exp ^ exp) + add) & ((le.Uint64(raw[24:])&exp ^ exp) + add)
	return t&tops == tops
}

// scanBF16 is firstNonFinite on one span of BF16 bytes (even length): 32 bytes at a time, then the
// element loop from the first block that holds a non-finite value (or the tail).
func scanBF16(raw []byte) int {
	i := 0
	for ; i+32 <= len(raw) && finiteWords(raw[i:i+32], bf16Exp, bf16Add, bf16Tops); i += 32 {
	}
	for ; i+2 <= len(raw); i += 2 {
		if binary.LittleEndian.Uint16(raw[i:])&0x7f80 == 0x7f80 { // exponent all ones
			return i / 2
		}
	}
	return -1
}

// scanF32 is scanBF16 for F32 bytes (length a multiple of 4).
func scanF32(raw []byte) int {
	i := 0
	for ; i+32 <= len(raw) && finiteWords(raw[i:i+32], f32Exp, f32Add, f32Tops); i += 32 {
	}
	for ; i+4 <= len(raw); i += 4 {
		if binary.LittleEndian.Uint32(raw[i:])&0x7f800000 == 0x7f800000 {
			return i / 4
		}
	}
	return -1
}
