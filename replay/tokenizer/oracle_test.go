package tokenizer

import (
	"slices"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

// This file checks the hand-written splitter against a second, generic implementation: a small
// backtracking regex engine (continuation passing, as Perl and fancy-regex backtrack) running the K3
// pattern written as a syntax tree. The two share nothing but Go's Unicode tables, so a mistake in
// pieceEnd's reasoning about which greedy part gives back what shows up as a difference.

// re is a node of the pattern: match calls k with every end position the node can reach from i, in
// priority order, and stops at the first k that returns true.
type re func(s []rune, i int, k func(int) bool) bool

func cls(pred func(rune) bool) re {
	return func(s []rune, i int, k func(int) bool) bool { return i < len(s) && pred(s[i]) && k(i+1) }
}

func seq(nodes ...re) re {
	if len(nodes) == 0 {
		return func(s []rune, i int, k func(int) bool) bool { return k(i) }
	}
	first, rest := nodes[0], seq(nodes[1:]...)
	return func(s []rune, i int, k func(int) bool) bool {
		return first(s, i, func(j int) bool { return rest(s, j, k) })
	}
}

func alt(nodes ...re) re {
	return func(s []rune, i int, k func(int) bool) bool {
		for _, n := range nodes {
			if n(s, i, k) {
				return true
			}
		}
		return false
	}
}

// rep is a greedy {min,max} repetition (max < 0: unbounded).
func rep(n re, min, max int) re {
	var try func(s []rune, i, count int, k func(int) bool) bool
	try = func(s []rune, i, count int, k func(int) bool) bool {
		if (max < 0 || count < max) && n(s, i, func(j int) bool { return j > i && try(s, j, count+1, k) }) {
			return true
		}
		return count >= min && k(i)
	}
	return func(s []rune, i int, k func(int) bool) bool { return try(s, i, 0, k) }
}

func notAhead(n re) re {
	return func(s []rune, i int, k func(int) bool) bool {
		return !n(s, i, func(int) bool { return true }) && k(i)
	}
}

// foldLit matches a literal case-insensitively under simple case folding.
func foldLit(lit string) re {
	var nodes []re
	for _, want := range lit {
		nodes = append(nodes, cls(func(r rune) bool {
			for f := unicode.SimpleFold(want); ; f = unicode.SimpleFold(f) {
				if r == f {
					return true
				}
				if f == want {
					return false
				}
			}
		}))
	}
	return seq(nodes...)
}

// oraclePattern is Pattern as a tree, with its classes written from Go's tables directly.
var oraclePattern = func() re {
	han := func(r rune) bool { return unicode.Is(unicode.Han, r) || (r >= 0x2EBF0 && r <= 0x2EE5D) }
	letter := func(r rune) bool { return unicode.IsLetter(r) || (r >= 0x2EBF0 && r <= 0x2EE5D) }
	upper := func(r rune) bool {
		return !han(r) && unicode.In(r, unicode.Lu, unicode.Lt, unicode.Lm, unicode.Lo, unicode.M)
	}
	lower := func(r rune) bool {
		return !han(r) && unicode.In(r, unicode.Ll, unicode.Lm, unicode.Lo, unicode.M)
	}
	pre := func(r rune) bool { return r != '\r' && r != '\n' && !letter(r) && !unicode.IsNumber(r) }
	space := unicode.IsSpace
	crlf := func(r rune) bool { return r == '\r' || r == '\n' }
	punct := func(r rune) bool { return !space(r) && !letter(r) && !unicode.IsNumber(r) }
	contraction := rep(alt(foldLit("'s"), foldLit("'t"), foldLit("'re"), foldLit("'ve"), foldLit("'m"), foldLit("'ll"), foldLit("'d")), 0, 1)
	return alt(
		rep(cls(han), 1, -1),
		seq(rep(cls(pre), 0, 1), rep(cls(upper), 0, -1), rep(cls(lower), 1, -1), contraction),
		seq(rep(cls(pre), 0, 1), rep(cls(upper), 1, -1), rep(cls(lower), 0, -1), contraction),
		rep(cls(unicode.IsNumber), 1, 3),
		seq(rep(cls(func(r rune) bool { return r == ' ' }), 0, 1), rep(cls(punct), 1, -1), rep(cls(crlf), 0, -1)),
		seq(rep(cls(space), 0, -1), rep(cls(crlf), 1, -1)),
		seq(rep(cls(space), 1, -1), notAhead(cls(func(r rune) bool { return !space(r) }))),
		rep(cls(space), 1, -1),
	)
}()

// oracleSplit splits valid UTF-8 with the oracle (no long-input rule: keep inputs short).
func oracleSplit(text string) []string {
	s := []rune(text)
	var out []string
	for i := 0; i < len(s); {
		end := -1
		if !oraclePattern(s, i, func(j int) bool { end = j; return true }) || end <= i {
			out = append(out, string(s[i:]))
			break // the pattern always matches; a failure shows up as a difference
		}
		out = append(out, string(s[i:end]))
		i = end
	}
	return out
}

// oracleAlphabet is a set of characters chosen to stress the class boundaries of the pattern.
var oracleAlphabet = []rune("aZé\u0301ǅʰªא你〇々⺀1٣½ ' \t\n\r\u00a0\u3000\u2028\x1c.!$,'sStTlLrReEvVmMdDſ" +
	"\u200d\u20e3\ufe0f👋🏽ター한ж" + string(rune(0x2EBF0)))

func TestSplitMatchesOracle(t *testing.T) {
	rng := newSplitMix(1)
	for n := range 20000 {
		var b strings.Builder
		for range 1 + rng.intn(12) {
			b.WriteRune(oracleAlphabet[rng.intn(len(oracleAlphabet))])
		}
		in := b.String()
		if got, want := Split(in), oracleSplit(in); !slices.Equal(got, want) {
			t.Fatalf("case %d: Split(%q):\n-oracle %q\n+got    %q", n, in, want, got)
		}
	}
}

func FuzzSplit(f *testing.F) {
	for _, s := range []string{"Hello world", "DON'T", "你好abc", " \n\n  x", "ABʰ.", "\xffa"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		if len(in) > 64 {
			return
		}
		got := Split(in)
		if strings.Join(got, "") != in {
			t.Fatalf("Split(%q) = %q does not concatenate to the input", in, got)
		}
		if utf8.ValidString(in) {
			if want := oracleSplit(in); !slices.Equal(got, want) {
				t.Fatalf("Split(%q):\n-oracle %q\n+got    %q", in, want, got)
			}
		}
	})
}

// splitMix is SplitMix64: a tiny generator whose output will never change with the Go version.
type splitMix struct{ s uint64 }

func newSplitMix(seed uint64) *splitMix { return &splitMix{seed} }

func (r *splitMix) next() uint64 {
	r.s += 0x9e3779b97f4a7c15
	z := r.s
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

func (r *splitMix) intn(n int) int { return int(r.next() % uint64(n)) }
