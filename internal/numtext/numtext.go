// Package numtext writes numbers for people to read in the command line's and the notebooks' output:
// thousands separators, counted nouns and byte sizes. One place, so every report says "1,048,576 tokens"
// and "11.0 GB" the same way.
package numtext

import (
	"fmt"
	"strconv"
)

// Integer is the integer types the writers take, so callers pass their counts as they hold them.
type Integer interface{ ~int | ~int32 | ~int64 }

// Commas writes n with thousands separators: 1,560,860,324,864 (and -1,024).
func Commas[T Integer](n T) string {
	s := strconv.FormatInt(int64(n), 10)
	neg := s[0] == '-'
	if neg {
		s = s[1:]
	}
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	if neg {
		return "-" + s
	}
	return s
}

// Count writes n and the noun, with an s unless n is 1: "1 wave", "3,072 tokens". Nouns whose plural is
// not noun+"s" are written by their callers.
func Count[T Integer](n T, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return Commas(n) + " " + noun + "s"
}

// Bytes writes n with a decimal unit and one decimal: "812 B", "54.4 kB", "11.0 GB".
func Bytes(n int64) string {
	v, units := float64(n), []string{"B", "kB", "MB", "GB", "TB", "PB"}
	i := 0
	for ; (v >= 1000 || v <= -1000) && i < len(units)-1; i++ {
		v /= 1000
	}
	if i == 0 {
		return fmt.Sprintf("%d B", n)
	}
	return fmt.Sprintf("%.1f %s", v, units[i])
}
