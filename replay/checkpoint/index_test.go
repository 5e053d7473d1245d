package checkpoint

import (
	"errors"
	"slices"
	"testing"
)

func TestParseIndexValid(t *testing.T) {
	idx, err := ParseIndex([]byte(`{"metadata":{"total_size":96,"format":"pt"},"extra":[1],
		"weight_map":{"b":"s2.safetensors","a":"s1.safetensors","c":"s2.safetensors"}}`))
	if err != nil {
		t.Fatal(err)
	}
	want := []IndexEntry{{"b", "s2.safetensors"}, {"a", "s1.safetensors"}, {"c", "s2.safetensors"}}
	if idx.TotalSize != 96 || !slices.Equal(idx.Entries, want) ||
		!slices.Equal(idx.Shards, []string{"s2.safetensors", "s1.safetensors"}) {
		t.Errorf("got %+v, want total 96, entries %v, shards [s2 s1]", idx, want)
	}
	idx, err = ParseIndex([]byte(`{"weight_map":{}}`))
	if err != nil || idx.TotalSize != -1 || len(idx.Entries) != 0 {
		t.Errorf("index without metadata: %+v, %v; want total -1, no entries", idx, err)
	}
}

func TestParseIndexDamage(t *testing.T) {
	const f = IndexFile + ": "
	tests := []struct{ name, in, want string }{
		{"not JSON", `weight_map`, f + `JSON byte 0: found 'w', want '{'`},
		{"no weight_map", `{"metadata":{"total_size":1}}`, f + "no weight_map"},
		{"parent directory", `{"weight_map":{"t":"../model-00001.safetensors"}}`,
			f + `tensor t: shard "../model-00001.safetensors" is a path, want a plain file name`},
		{"absolute path", `{"weight_map":{"t":"/etc/passwd"}}`, f + `tensor t: shard "/etc/passwd" is a path, want a plain file name`},
		{"dot dot", `{"weight_map":{"t":".."}}`, f + `tensor t: shard ".." is not a file name`},
		{"empty name", `{"weight_map":{"t":""}}`, f + `tensor t: shard "" is empty`},
		{"backslash", `{"weight_map":{"t":"a\\b"}}`, f + `tensor t: shard "a\\b" is a path, want a plain file name`},
		{"shard not a string", `{"weight_map":{"t":3}}`, f + `weight_map value: JSON byte 19: found '3', want '"'`},
		{"fractional total_size", `{"metadata":{"total_size":1.5},"weight_map":{}}`,
			f + "metadata.total_size: JSON byte 27: want an integer, found a fraction or exponent"},
		{"duplicate weight_map", `{"weight_map":{},"weight_map":{}}`, f + "JSON byte 30: duplicate weight_map"},
		{"trailing", `{"weight_map":{}} {}`, f + "JSON byte 18: unexpected '{' after the end of the document"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			idx, err := ParseIndex([]byte(tc.in))
			if err == nil {
				t.Fatalf("accepted: %+v", idx)
			}
			if err.Error() != tc.want {
				t.Errorf("error\n got: %s\nwant: %s", err, tc.want)
			}
			if !errors.Is(err, ErrIndex) {
				t.Errorf("errors.Is(%v, ErrIndex) = false", err)
			}
		})
	}
}
