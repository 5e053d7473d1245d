package main

import (
	"fmt"
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

// Set implements flag.Value.
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
	if err != nil || f < 0 || f*scale >= 1<<62 {
		return fmt.Errorf("%q is not a size: want bytes, or a number with KB, MB, GB, TB, KiB, MiB, GiB or TiB", v)
	}
	*s = byteSize(f * scale)
	return nil
}

// String implements flag.Value.
func (s *byteSize) String() string {
	if s == nil || *s == 0 {
		return "0"
	}
	return fmt.Sprintf("%.3gGB", float64(*s)/1e9)
}
