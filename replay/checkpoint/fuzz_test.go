package checkpoint

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"slices"
	"testing"
)

// FuzzParseHeader must never panic, and whatever it accepts must be a valid header by an independent
// reading: encoding/json parses the same JSON to the same tensors, spans are sorted, disjoint, inside
// the file and exactly as long as their shapes need.
func FuzzParseHeader(f *testing.F) {
	f.Add(shardBytes([]tt{{name: "a", dtype: BF16, shape: []int64{2, 3}}, {name: "b", dtype: F32, shape: []int64{}}}))
	f.Add(rawShard(`{"__metadata__":{"format":"pt"},"t\u00e9":{"dtype":"U8","shape":[0],"data_offsets":[0,0]}}`, nil))
	f.Add(rawShard(`{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"b":{"dtype":"U8","shape":[4],"data_offsets":[2,6]}}`, make([]byte, 8)))
	f.Add(binary.LittleEndian.AppendUint64(nil, 1<<62))
	f.Fuzz(func(t *testing.T, data []byte) {
		h, err := ParseHeader("fuzz.safetensors", bytes.NewReader(data), int64(len(data)))
		if err != nil {
			return
		}
		js := data[8:h.DataStart]
		var doc map[string]json.RawMessage
		if err := json.Unmarshal(js, &doc); err != nil {
			t.Fatalf("accepted a header encoding/json refuses: %v", err)
		}
		delete(doc, "__metadata__")
		if len(doc) != len(h.Tensors) {
			t.Fatalf("%d tensors, encoding/json sees %d keys", len(h.Tensors), len(doc))
		}
		var end int64 = h.DataStart
		for _, tn := range h.Tensors {
			var fields map[string]json.RawMessage
			var dtype string
			var shape, offs []int64
			if json.Unmarshal(doc[tn.Name], &fields) != nil || json.Unmarshal(fields["dtype"], &dtype) != nil ||
				json.Unmarshal(fields["shape"], &shape) != nil || json.Unmarshal(fields["data_offsets"], &offs) != nil {
				t.Fatalf("tensor %q: encoding/json cannot read its entry %s", tn.Name, doc[tn.Name])
			}
			if DType(dtype) != tn.DType || !slices.Equal(shape, tn.Shape) || len(offs) != 2 ||
				offs[0]+h.DataStart != tn.Offset || offs[1]-offs[0] != tn.Size {
				t.Fatalf("tensor %v disagrees with encoding/json: %s %v %v", tn, dtype, shape, offs)
			}
			if tn.Offset < end || tn.Offset+tn.Size > h.Size || tn.Size != tn.Spec().Bytes() {
				t.Fatalf("tensor %v: span overlaps the previous (ending %d) or leaves the file (%d bytes)", tn, end, h.Size)
			}
			end = tn.Offset + tn.Size
		}
	})
}

// FuzzParseIndex must never panic, and whatever it accepts encoding/json must read to the same map.
func FuzzParseIndex(f *testing.F) {
	f.Add([]byte(indexJSON(map[string]string{"a": "s1.safetensors", "b": "s2.safetensors"}, 12)))
	f.Add([]byte(`{"metadata":{"total_size":1,"x":[{}]},"weight_map":{"a\\u0041":"s","b":"s"}}`))
	f.Add([]byte(`{"weight_map":{"t":"../x"}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		idx, err := ParseIndex(data)
		if err != nil {
			return
		}
		var doc struct {
			WeightMap map[string]string `json:"weight_map"`
		}
		if err := json.Unmarshal(data, &doc); err != nil {
			t.Fatalf("accepted an index encoding/json refuses: %v", err)
		}
		last := map[string]string{} // encoding/json keeps the last of duplicate keys; Open refuses them
		for _, e := range idx.Entries {
			if plainNameProblem(e.File) != "" {
				t.Fatalf("accepted shard name %q", e.File)
			}
			last[e.Name] = e.File
		}
		if len(last) != len(doc.WeightMap) {
			t.Fatalf("%d names, encoding/json sees %d", len(last), len(doc.WeightMap))
		}
		for name, file := range last {
			if doc.WeightMap[name] != file {
				t.Fatalf("tensor %q: shard %q, encoding/json says %q", name, file, doc.WeightMap[name])
			}
		}
	})
}
