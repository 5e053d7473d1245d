package checkpoint

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// The test-side safetensors writer. It is deliberately separate from replay/synth's writer: the reader's
// tests must not depend on the code they would be checking, and damaged files need raw control.

// tt is a tensor to write. Data nil means a deterministic pattern derived from the name.
type tt struct {
	name  string
	dtype DType
	shape []int64
	data  []byte
}

func (x tt) bytes() []byte {
	if x.data != nil {
		return x.data
	}
	n := x.dtype.Size()
	for _, d := range x.shape {
		n *= d
	}
	b := make([]byte, n)
	seed := uint32(len(x.name))
	for _, c := range x.name {
		seed = seed*31 + uint32(c)
	}
	for i := range b {
		seed = seed*1664525 + 1013904223
		b[i] = byte(seed >> 24)
	}
	return b
}

// headerJSON renders the header of tensors laid out back to back in order, with metadata if non-nil.
func headerJSON(tensors []tt, metadata map[string]string) string {
	var parts []string
	if metadata != nil {
		m, _ := json.Marshal(metadata)
		parts = append(parts, `"__metadata__":`+string(m))
	}
	var off int64
	for _, x := range tensors {
		n := int64(len(x.bytes()))
		name, _ := json.Marshal(x.name)
		shape := make([]string, len(x.shape))
		for i, d := range x.shape {
			shape[i] = fmt.Sprint(d)
		}
		parts = append(parts, fmt.Sprintf(`%s:{"dtype":%q,"shape":[%s],"data_offsets":[%d,%d]}`,
			name, x.dtype, strings.Join(shape, ","), off, off+n))
		off += n
	}
	return "{" + strings.Join(parts, ",") + "}"
}

// rawShard frames a header (padded with spaces to a multiple of 8, as the safetensors writer does) and
// the data section.
func rawShard(header string, data []byte) []byte {
	for len(header)%8 != 0 {
		header += " "
	}
	b := binary.LittleEndian.AppendUint64(nil, uint64(len(header)))
	b = append(b, header...)
	return append(b, data...)
}

// shardBytes is a complete, valid shard holding tensors.
func shardBytes(tensors []tt) []byte {
	var data []byte
	for _, x := range tensors {
		data = append(data, x.bytes()...)
	}
	return rawShard(headerJSON(tensors, map[string]string{"format": "pt"}), data)
}

func writeFile(t testing.TB, dir, name string, b []byte) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// indexJSON renders an index for weightMap (tensor -> shard), entries sorted by name.
func indexJSON(weightMap map[string]string, totalSize int64) string {
	var parts []string
	for _, name := range slices.Sorted(maps.Keys(weightMap)) {
		k, _ := json.Marshal(name)
		v, _ := json.Marshal(weightMap[name])
		parts = append(parts, string(k)+":"+string(v))
	}
	return fmt.Sprintf(`{"metadata":{"total_size":%d},"weight_map":{%s}}`, totalSize, strings.Join(parts, ","))
}

// writeCheckpoint writes each shard and the matching index into dir.
func writeCheckpoint(t testing.TB, dir string, shards map[string][]tt) {
	t.Helper()
	wm := map[string]string{}
	var total int64
	for file, tensors := range shards {
		writeFile(t, dir, file, shardBytes(tensors))
		for _, x := range tensors {
			wm[x.name] = file
			total += int64(len(x.bytes()))
		}
	}
	writeFile(t, dir, IndexFile, []byte(indexJSON(wm, total)))
}

// smallModel is a two-shard checkpoint with the three dtypes K3 uses, names in K3's style.
func smallModel() map[string][]tt {
	const p = "language_model.model."
	return map[string][]tt{
		"model-00001-of-00002.safetensors": {
			{name: p + "embed_tokens.weight", dtype: BF16, shape: []int64{16, 8}},
			{name: p + "layers.0.self_attn.A_log", dtype: F32, shape: []int64{4}},
			{name: p + "norm.weight", dtype: BF16, shape: []int64{8}},
		},
		"model-00002-of-00002.safetensors": {
			{name: p + "layers.1.block_sparse_moe.experts.0.w1.weight_packed", dtype: U8, shape: []int64{6, 32}},
			{name: p + "layers.1.block_sparse_moe.experts.0.w1.weight_scale", dtype: U8, shape: []int64{6, 2}},
			{name: p + "layers.1.mlp_res_proj.weight", dtype: BF16, shape: []int64{1, 8}},
			{name: "language_model.lm_head.weight", dtype: BF16, shape: []int64{16, 8}},
			{name: "vision_tower.patch_embed.weight", dtype: BF16, shape: []int64{2, 2}},
		},
	}
}

// specsOf returns the specs of every tensor of a model, as a layer plan would.
func specsOf(model map[string][]tt) []Spec {
	var specs []Spec
	for _, tensors := range model {
		for _, x := range tensors {
			specs = append(specs, Spec{Name: x.name, DType: x.dtype, Shape: x.shape})
		}
	}
	return specs
}
