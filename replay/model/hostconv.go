package model

import (
	"math"
	"runtime"
	"sync"
	"sync/atomic"
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
	var float32s atomic.Bool // some value is not a bfloat16 value: every range stops
	eachRange(len(v), func(lo, hi int) {
		for i := lo; i < hi && !float32s.Load(); i++ {
			u := math.Float32bits(v[i])
			if u&0xffff != 0 {
				float32s.Store(true)
				return
			}
			bf[i] = uint16(u >> 16)
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
	eachRange(len(bf), func(lo, hi int) {
		for i := lo; i < hi; i++ {
			v[i] = math.Float32frombits(uint32(bf[i]) << 16)
		}
	})
	return v
}
