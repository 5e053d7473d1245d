package tokenizer

import (
	"hash/maphash"
	"math"
	"strings"
	"sync"
	"sync/atomic"
)

// Encode returns the ids of text with special tokens disabled: text that spells a special token's name,
// such as a literal "<|open|>", is ordinary text. This is what Kimi's tokenizer computes with
// allow_special_tokens=False: the long-input rule, the K3 pattern, then tiktoken's encode_ordinary on
// each piece. No BOS is added.
func (t *Tokenizer) Encode(text string) []int32 { return t.AppendEncode(nil, text) }

// AppendEncode appends the ids of Encode(text) to dst and returns the extended slice.
func (t *Tokenizer) AppendEncode(dst []int32, text string) []int32 {
	dst, _ = t.appendLimit(dst, text, false, math.MaxInt)
	return dst
}

// EncodeLimit is Encode that stops early: it returns Encode(text) and true when that has at most limit
// ids, else false and at most limit ids plus one piece's, having encoded only that much of text, so that
// a service can refuse a text by its token count without tokenizing all of it (or holding its ids).
func (t *Tokenizer) EncodeLimit(text string, limit int) ([]int32, bool) {
	return t.appendLimit(nil, text, false, limit)
}

// appendLimit appends the ids of text to dst (EncodeSpecial's with allowSpecial, else Encode's) and
// returns true when dst then holds at most limit ids; else it stops as soon as dst holds more (at most
// one piece's ids, or one special id, past the limit) and returns false, having encoded no further. It
// is AppendEncode or AppendEncodeSpecial (which are it with no limit) with a count after each piece.
func (t *Tokenizer) appendLimit(dst []int32, text string, allowSpecial bool, limit int) ([]int32, bool) {
	if len(dst) > limit {
		return dst, false
	}
	// pieces encodes s, a stretch with no special names, piece by piece.
	pieces := func(s string) bool {
		for i := 0; i < len(s); {
			j := pieceEnd(s, i)
			dst = t.appendPiece(dst, s[i:j])
			if len(dst) > limit {
				return false
			}
			i = j
		}
		return true
	}
	ok := forEachChunk(text, func(chunk string) bool {
		if !allowSpecial {
			return pieces(chunk)
		}
		for len(chunk) > 0 { // specials recognised inside one cut only (EncodeSpecial)
			at, n, id := t.nextSpecial(chunk)
			if !pieces(chunk[:at]) {
				return false
			}
			if n == 0 {
				break
			}
			if dst = append(dst, id); len(dst) > limit {
				return false
			}
			chunk = chunk[at+n:]
		}
		return true
	})
	return dst, ok
}

// EncodeSpecial returns the ids of text with special tokens enabled: every occurrence of a special
// token's name becomes its id (tiktoken's allowed_special="all"), the text between is encoded as by
// Encode. Where two names match at one position the longer wins (the names of Kimi's specials are never
// a prefix of one another). As in Kimi's tokenizer the long-input rule cuts first, so a name is
// recognised only inside one cut.
func (t *Tokenizer) EncodeSpecial(text string) []int32 { return t.AppendEncodeSpecial(nil, text) }

// AppendEncodeSpecial appends the ids of EncodeSpecial(text) to dst and returns the extended slice.
func (t *Tokenizer) AppendEncodeSpecial(dst []int32, text string) []int32 {
	dst, _ = t.appendLimit(dst, text, true, math.MaxInt)
	return dst
}

// nextSpecial finds the leftmost special name in s: its offset, length and id, or (len(s), 0, 0).
func (t *Tokenizer) nextSpecial(s string) (at, n int, id int32) {
	for i := 0; i < len(s); i++ {
		if !t.specialFirst[s[i]] {
			continue
		}
		best := 0
		for _, l := range t.specialLens {
			if l > best && i+l <= len(s) {
				if sid, ok := t.specialIDs[s[i:i+l]]; ok {
					best, id = l, sid
				}
			}
		}
		if best > 0 {
			return i, best, id
		}
	}
	return len(s), 0, 0
}

// appendPiece appends the ids of one pre-tokenized piece: the token itself if the piece is one (the
// common case, one map lookup), else the cached or computed BPE merge.
func (t *Tokenizer) appendPiece(dst []int32, piece string) []int32 {
	if id, ok := t.ranks[piece]; ok {
		return append(dst, id)
	}
	if len(piece) > maxCachedPiece {
		return t.appendBPE(dst, piece)
	}
	if ids, ok := t.cache.get(piece); ok {
		return append(dst, ids...)
	}
	n := len(dst)
	dst = t.appendBPE(dst, piece)
	t.cache.put(piece, dst[n:])
	return dst
}

// maxCachedPiece bounds the pieces the cache keeps; longer ones are rare and cheap to recompute relative
// to their length.
const maxCachedPiece = 64

// maxCacheEntries bounds the cache (about 10 MB at most). Once full it keeps what it has: the common
// pieces of a corpus arrive early.
const maxCacheEntries = 1 << 17

// pieceCache maps pieces that are not single tokens to their ids. It is safe for concurrent use and
// never evicts; its zero value is ready. Shards of plain maps under read-write locks, not sync.Map: a
// string key boxed into sync.Map's any would allocate on every lookup.
type pieceCache struct {
	shards [cacheShards]struct {
		sync.RWMutex
		m map[string][]int32
	}
	n atomic.Int64
}

const cacheShards = 16

var cacheSeed = maphash.MakeSeed()

func (c *pieceCache) shard(piece string) int {
	return int(maphash.String(cacheSeed, piece) % cacheShards)
}

func (c *pieceCache) get(piece string) ([]int32, bool) {
	sh := &c.shards[c.shard(piece)]
	sh.RLock()
	ids, ok := sh.m[piece]
	sh.RUnlock()
	return ids, ok
}

func (c *pieceCache) put(piece string, ids []int32) {
	if c.n.Load() >= maxCacheEntries {
		return
	}
	sh := &c.shards[c.shard(piece)]
	sh.Lock()
	defer sh.Unlock()
	if sh.m == nil {
		sh.m = map[string][]int32{}
	}
	if _, ok := sh.m[piece]; !ok {
		// Clone both: the piece points into the caller's text, ids into the caller's slice.
		sh.m[strings.Clone(piece)] = append([]int32(nil), ids...)
		c.n.Add(1)
	}
}
