package datasets

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
)

// Key names one cached result: the SHA-256 of the model's config hash, the engine version and the
// canonical JSON of the request. Two requests that differ only in map order or JSON spacing get the same
// key; a new engine version or another model gets a new one.
type Key [sha256.Size]byte

// keyDomain separates these hashes from any other SHA-256 of the same bytes, and versions the scheme.
const keyDomain = "potato-k3 results cache v1"

// NewKey returns the key of request (any value encoding/json can marshal, json.RawMessage included)
// replayed by engineVersion on the model whose config hashes to configHash.
func NewKey(configHash, engineVersion string, request any) (Key, error) {
	canon, err := CanonicalJSON(request)
	if err != nil {
		return Key{}, fmt.Errorf("datasets: cache key: %w", err)
	}
	h := sha256.New()
	// Each part is length-prefixed so that ("ab", "c") and ("a", "bc") hash differently.
	for _, part := range [][]byte{[]byte(keyDomain), []byte(configHash), []byte(engineVersion), canon} {
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(part)))
		h.Write(n[:])
		h.Write(part)
	}
	var k Key
	h.Sum(k[:0])
	return k, nil
}

// String is the key in lower-case hex, as it appears in the cache directory.
func (k Key) String() string { return hex.EncodeToString(k[:]) }

// CanonicalJSON writes v as JSON with object keys sorted, no insignificant space, no HTML escaping, and
// numbers kept exactly as encoding/json wrote them (so a large integer id does not pass through float64).
func CanonicalJSON(v any) ([]byte, error) {
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var generic any
	if err := dec.Decode(&generic); err != nil {
		return nil, err
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	// encoding/json writes map keys in sorted order: this is what makes the text canonical.
	if err := enc.Encode(generic); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}
