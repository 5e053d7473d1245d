package model

import (
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/potato-k3/potato-k3/replay/bf16"
)

// Converting a slice's state between float32 and the bfloat16 bits kept in host memory touches every
// value: a 43,008-token slice of K3's running sum and one block is 617 million values, about 0.6 s on one
// core, once each way per slice and layer. The conversions below split large arrays over the cores (each
// value converts alone, so the result does not depend on the split).

// convChunk is the fewest values a goroutine converts: below it one goroutine does all.
const convChunk = 1 << 20

// eachRange calls fn on consecutive ranges of 0..n-1, in parallel when n is large.
func eachRange(n int, fn func(lo, hi int)) {
	parts := min(runtime.GOMAXPROCS(0), (n+convChunk-1)/convChunk)
	if parts <= 1 {
		fn(0, n)
		return
	}
	per := (n + parts - 1) / parts
	var wg sync.WaitGroup
	for lo := 0; lo < n; lo += per {
		wg.Go(func() { fn(lo, min(lo+per, n)) })
	}
	wg.Wait()
}

// toBF16Bits returns the bfloat16 bits of v when every value is a bfloat16 value (its low 16 bits zero),
// else ok false.
func toBF16Bits(v []float32) (bf []uint16, ok bool) {
	bf = make([]uint16, len(v))
	var float32s atomic.Bool // some value is not a bfloat16 value: ranges not yet begun skip
	eachRange(len(v), func(lo, hi int) {
		if !float32s.Load() && !bf16.Bits(bf[lo:hi], v[lo:hi]) {
			float32s.Store(true)
		}
	})
	if float32s.Load() {
		return nil, false
	}
	return bf, true
}

// fromBF16Bits returns the float32 values of bfloat16 bits.
func fromBF16Bits(bf []uint16) []float32 {
	v := make([]float32, len(bf))
	eachRange(len(bf), func(lo, hi int) { bf16.Widen(v[lo:hi], bf[lo:hi]) })
	return v
}
