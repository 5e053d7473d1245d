package checkpoint

import (
	"bytes"
	"encoding/binary"
	"errors"
	"strings"
	"testing"
)

func parseBytes(b []byte) (*Header, error) {
	return ParseHeader("model-00003-of-000096.safetensors", bytes.NewReader(b), int64(len(b)))
}

func TestParseHeaderValid(t *testing.T) {
	tensors := []tt{
		{name: "b", dtype: F32, shape: []int64{3}},
		{name: "a", dtype: BF16, shape: []int64{2, 2}},
		{name: "empty", dtype: BF16, shape: []int64{0, 7}},
		{name: "scalar", dtype: U8, shape: []int64{}},
		{name: `esc\"aped/é`, dtype: U8, shape: []int64{1}},
	}
	b := shardBytes(tensors)
	h, err := parseBytes(b)
	if err != nil {
		t.Fatal(err)
	}
	hdrLen := int64(binary.LittleEndian.Uint64(b))
	if h.DataStart != 8+hdrLen || h.Size != int64(len(b)) || h.Metadata["format"] != "pt" {
		t.Errorf("DataStart %d Size %d Metadata %v; want %d %d format=pt", h.DataStart, h.Size, h.Metadata, 8+hdrLen, len(b))
	}
	want := []struct {
		name         string
		offset, size int64
	}{{"b", 0, 12}, {"a", 12, 8}, {"empty", 20, 0}, {"scalar", 20, 1}, {`esc\"aped/é`, 21, 1}}
	if len(h.Tensors) != len(want) {
		t.Fatalf("got %d tensors, want %d", len(h.Tensors), len(want))
	}
	for i, w := range want {
		got := h.Tensors[i]
		if got.Name != w.name || got.Offset != h.DataStart+w.offset || got.Size != w.size || got.File != h.File {
			t.Errorf("tensor %d = %v, want %s at data+%d size %d", i, got, w.name, w.offset, w.size)
		}
		if !bytes.Equal(b[got.Offset:got.Offset+got.Size], tensors[i].bytes()) {
			t.Errorf("tensor %s: bytes at its offset are not its data", got.Name)
		}
	}
	if sh := h.Tensors[1].Shape; cap(sh) != len(sh) {
		t.Errorf("shape slice has spare capacity %d: appends would clobber the next shape", cap(sh))
	}
}

// TestParseHeaderDamage feeds one kind of damage per case and wants the exact message.
func TestParseHeaderDamage(t *testing.T) {
	const f = "model-00003-of-000096.safetensors: "
	const w = "language_model.model.layers.2.mlp.gate_proj.weight"
	one := func(js string, data int) []byte { return rawShard(js, make([]byte, data)) }
	withLen := func(n uint64, rest string) []byte {
		return append(binary.LittleEndian.AppendUint64(nil, n), rest...)
	}
	valid := shardBytes([]tt{{name: w, dtype: BF16, shape: []int64{4, 2}}})
	tests := []struct {
		name string
		in   []byte
		want string
	}{
		{"shorter than the length field", []byte{1, 2, 3}, f + "file of 3 bytes is too short for the 8-byte header length"},
		{"absurd header length", withLen(1<<40, "{}"), f + "header length 1099511627776 exceeds the limit of 268435456 bytes"},
		{"header length past the end", withLen(100, "{}"), f + "header length 100 runs past the end of the file (10 bytes)"},
		{"truncated inside the header", valid[:30], f + "header length 144 runs past the end of the file (30 bytes)"},
		{"zero header length", withLen(0, ""), f + "header length 0 is too short for a JSON object"},
		{"truncated inside the data", valid[:len(valid)-3],
			f + "tensor " + w + ": data_offsets [0 16] end past file size 165 (data section starts at byte 152)"},
		{"malformed JSON", one(`{"a":{"dtype":"BF16",}}`, 0), f + `tensor a: JSON byte 21: found '}', want '"'`},
		{"not an object", one(`["a"]`, 0), f + `header JSON byte 0: found '[', want '{'`},
		{"trailing garbage", one(`{}x`, 0), f + `header JSON byte 2: unexpected 'x' after the end of the document`},
		{"unknown dtype", one(`{"t":{"dtype":"F4","shape":[2],"data_offsets":[0,1]}}`, 1), f + `tensor t: unknown dtype "F4"`},
		{"missing dtype", one(`{"t":{"shape":[2],"data_offsets":[0,4]}}`, 4), f + `tensor t: missing field "dtype"`},
		{"missing offsets", one(`{"t":{"dtype":"F32","shape":[2]}}`, 8), f + `tensor t: missing field "data_offsets"`},
		{"duplicate field", one(`{"t":{"dtype":"F32","dtype":"F32","shape":[1],"data_offsets":[0,4]}}`, 4),
			f + `tensor t: duplicate field "dtype"`},
		{"shape and span disagree", one(`{"`+w+`":{"dtype":"BF16","shape":[7168,512],"data_offsets":[0,8]}}`, 8),
			f + "tensor " + w + ": data_offsets [0 8] span 8 bytes, shape [7168 512] BF16 needs 7340032"},
		{"negative dim", one(`{"t":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}}`, 4),
			f + "tensor t: shape: JSON byte 29: negative number, want a non-negative integer"},
		{"fractional dim", one(`{"t":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}}`, 4),
			f + "tensor t: shape: JSON byte 30: want an integer, found a fraction or exponent"},
		{"dim past int64", one(`{"t":{"dtype":"F32","shape":[9223372036854775808],"data_offsets":[0,4]}}`, 4),
			f + "tensor t: shape: JSON byte 47: integer overflows int64"},
		{"dims whose product overflows", one(`{"t":{"dtype":"BF16","shape":[4294967296,4294967296],"data_offsets":[0,0]}}`, 0),
			f + "tensor t: shape [4294967296 4294967296] BF16 overflows int64 bytes"},
		{"end before begin", one(`{"t":{"dtype":"U8","shape":[0],"data_offsets":[4,0]}}`, 4),
			f + "tensor t: data_offsets [4 0] end before begin"},
		{"three offsets", one(`{"t":{"dtype":"U8","shape":[1],"data_offsets":[0,1,2]}}`, 4),
			f + "tensor t: data_offsets: JSON byte 51: more than 2 values"},
		{"one offset", one(`{"t":{"dtype":"U8","shape":[1],"data_offsets":[1]}}`, 4),
			f + "tensor t: data_offsets: 1 values, want 2"},
		{"offsets past the end", one(`{"t":{"dtype":"U8","shape":[8],"data_offsets":[100,108]}}`, 4),
			f + "tensor t: data_offsets [100 108] end past file size 76 (data section starts at byte 72)"},
		{"overlapping spans", one(`{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"b":{"dtype":"U8","shape":[4],"data_offsets":[2,6]}}`, 8),
			f + "tensor b: data_offsets [2 6] overlap tensor a [0 4]"},
		{"duplicate tensor", one(`{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}`, 2),
			f + "tensor a: appears twice in the header"},
		{"metadata value not a string", one(`{"__metadata__":{"format":1}}`, 0),
			f + `header __metadata__ value: JSON byte 26: found '1', want '"'`},
		{"duplicate metadata", one(`{"__metadata__":{},"__metadata__":{}}`, 0), f + "header JSON byte 34: duplicate __metadata__"},
		{"invalid UTF-8 name", one("{\"a\xff\":{}}", 0), f + "header JSON byte 3: invalid UTF-8 in string"},
		{"lone surrogate", one(`{"\ud800":{}}`, 0), f + `header JSON byte 8: lone UTF-16 surrogate in \u escape`},
		{"control character", one("{\"a\nb\":{}}", 0), f + "header JSON byte 3: control character 0x0a in string"},
		{"deep nesting in an unknown field", one(`{"t":{"x":`+strings.Repeat("[", 100)+strings.Repeat("]", 100)+`}}`, 0),
			f + "tensor t: JSON byte 74: nesting deeper than 64"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h, err := parseBytes(tc.in)
			if err == nil {
				t.Fatalf("accepted: %+v", h)
			}
			if err.Error() != tc.want {
				t.Errorf("error\n got: %s\nwant: %s", err, tc.want)
			}
			if !errors.Is(err, ErrHeader) {
				t.Errorf("errors.Is(%v, ErrHeader) = false", err)
			}
		})
	}
}

// TestParseHeaderTolerates checks what the format allows: unknown fields, padding, gaps, empty tensors
// at a neighbour's end, whitespace and escapes.
func TestParseHeaderTolerates(t *testing.T) {
	tests := map[string]string{
		"unknown fields":       `{"t":{"dtype":"U8","x":{"y":[1,true,null,-2.5e3]},"shape":[1],"data_offsets":[0,1]}}`,
		"gap between tensors":  `{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"b":{"dtype":"U8","shape":[1],"data_offsets":[3,4]}}`,
		"empty at a boundary":  `{"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"b":{"dtype":"U8","shape":[0],"data_offsets":[2,2]},"c":{"dtype":"U8","shape":[2],"data_offsets":[2,4]}}`,
		"whitespace":           " {\n\t\"t\" : { \"dtype\" : \"U8\" , \"shape\" : [ 1 ] , \"data_offsets\" : [ 0 , 1 ] } }\r\n",
		"escaped name":         `{"t\u00e9\ud83d\ude00\n":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}`,
		"empty header":         `{}`,
		"metadata with escape": `{"__metadata__":{"k\"ey":"va\\lue"}}`,
	}
	for name, js := range tests {
		t.Run(name, func(t *testing.T) {
			if _, err := parseBytes(rawShard(js, make([]byte, 4))); err != nil {
				t.Error(err)
			}
		})
	}
}
