package main

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// byteSize is a flag value holding a number of bytes, written as a plain count or with a unit: KB, MB,
// GB, TB (powers of 1000) or KiB, MiB, GiB, TiB (powers of 1024), case-insensitive ("40GB", "1.5TiB").
type byteSize int64

// units are the accepted suffixes, longest first so that "GiB" is not read as "B".
var units = []struct {
	suffix string
	scale  float64
}{
	{"kib", 1 << 10}, {"mib", 1 << 20}, {"gib", 1 << 30}, {"tib", 1 << 40},
	{"kb", 1e3}, {"mb", 1e6}, {"gb", 1e9}, {"tb", 1e12}, {"b", 1},
}

// Set implements flag.Value. It refuses what is not a whole, finite number of bytes: NaN and Inf (which
// ParseFloat reads, and which converted to no size anyone meant), and a fraction of a byte ("0.5",
// "1e-3"), which truncated to 0 and so silently meant the flag's default. Decimal fractions of a unit
// are whole bytes ("1.5KB" is 1,500) and stay accepted.
func (s *byteSize) Set(v string) error {
	t := strings.ToLower(strings.TrimSpace(v))
	scale := 1.0
	for _, u := range units {
		if strings.HasSuffix(t, u.suffix) {
			t, scale = strings.TrimSpace(strings.TrimSuffix(t, u.suffix)), u.scale
			break
		}
	}
	f, err := strconv.ParseFloat(t, 64)
	n := f * scale
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) || n < 0 || n >= 1<<62 {
		return fmt.Errorf("%q is not a size: want bytes, or a number with KB, MB, GB, TB, KiB, MiB, GiB or TiB", v)
	}
	// A decimal such as 1.1 is not exact in binary: 1.1GB comes out a few billionths of a byte off, which
	// is not a fraction anyone wrote.
	whole := math.Round(n)
	if math.Abs(n-whole) > 1e-15*max(n, 1) { // a few units in the last place of a float64
		return fmt.Errorf("%q is not a whole number of bytes (%g bytes)", v, n)
	}
	*s = byteSize(whole)
	return nil
}

// String implements flag.Value.
func (s *byteSize) String() string {
	if s == nil || *s == 0 {
		return "0"
	}
	return fmt.Sprintf("%.3gGB", float64(*s)/1e9)
}
