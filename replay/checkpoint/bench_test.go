package checkpoint

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// k3Layout lists K3's 497,220 tensors (K3_SPEC section 2) with their real shapes, as the shards of a
// real checkpoint would name them. The vision tensors' names and shapes are made up (the engine skips
// them); only their count matters here. It is a test fixture, not the layer plan (that is replay/model).
func k3Layout() []tt {
	const p = "language_model.model."
	var out []tt
	add := func(name string, dt DType, shape ...int64) {
		out = append(out, tt{name: name, dtype: dt, shape: shape})
	}
	add(p+"embed_tokens.weight", BF16, 163840, 7168)
	add(p+"norm.weight", BF16, 7168)
	add(p+"output_attn_res_norm.weight", BF16, 7168)
	add(p+"output_attn_res_proj.weight", BF16, 1, 7168)
	add("language_model.lm_head.weight", BF16, 163840, 7168)
	for i := range 93 {
		l := fmt.Sprintf("%slayers.%d.", p, i)
		for _, n := range []string{"input_layernorm", "post_attention_layernorm", "self_attention_res_norm", "mlp_res_norm"} {
			add(l+n+".weight", BF16, 7168)
		}
		add(l+"self_attention_res_proj.weight", BF16, 1, 7168)
		add(l+"mlp_res_proj.weight", BF16, 1, 7168)
		a := l + "self_attn."
		if i%4 == 3 || i == 92 { // MLA layers, 0-indexed: 3, 7, ..., 91, 92
			add(a+"q_a_proj.weight", BF16, 1536, 7168)
			add(a+"q_a_layernorm.weight", BF16, 1536)
			add(a+"q_b_proj.weight", BF16, 18432, 1536)
			add(a+"kv_a_proj_with_mqa.weight", BF16, 576, 7168)
			add(a+"kv_a_layernorm.weight", BF16, 512)
			add(a+"kv_b_proj.weight", BF16, 24576, 512)
			add(a+"g_proj.weight", BF16, 12288, 7168)
			add(a+"o_proj.weight", BF16, 7168, 12288)
		} else {
			for _, n := range []string{"q_proj", "k_proj", "v_proj", "g_proj"} {
				add(a+n+".weight", BF16, 12288, 7168)
			}
			for _, n := range []string{"q_conv1d", "k_conv1d", "v_conv1d"} {
				add(a+n+".weight", F32, 12288, 1, 4)
			}
			add(a+"f_a_proj.weight", BF16, 128, 7168)
			add(a+"f_b_proj.weight", BF16, 12288, 128)
			add(a+"b_proj.weight", BF16, 96, 7168)
			add(a+"A_log", F32, 128)
			add(a+"dt_bias", F32, 12288)
			add(a+"o_norm.weight", F32, 128)
			add(a+"o_proj.weight", BF16, 7168, 12288)
		}
		if i == 0 {
			add(l+"mlp.gate_proj.weight", BF16, 33792, 7168)
			add(l+"mlp.up_proj.weight", BF16, 33792, 7168)
			add(l+"mlp.down_proj.weight", BF16, 7168, 33792)
			continue
		}
		m := l + "block_sparse_moe."
		add(m+"gate.weight", BF16, 896, 7168)
		add(m+"gate.e_score_correction_bias", F32, 896)
		add(m+"routed_expert_down_proj.weight", BF16, 3584, 7168)
		add(m+"routed_expert_norm.weight", BF16, 3584)
		add(m+"routed_expert_up_proj.weight", BF16, 7168, 3584)
		add(m+"shared_experts.gate_proj.weight", BF16, 6144, 7168)
		add(m+"shared_experts.up_proj.weight", BF16, 6144, 7168)
		add(m+"shared_experts.down_proj.weight", BF16, 7168, 6144)
		for e := range 896 {
			x := fmt.Sprintf("%sexperts.%d.", m, e)
			for _, w := range []string{"w1", "w3"} {
				add(x+w+".weight_packed", U8, 3072, 1792)
				add(x+w+".weight_scale", U8, 3072, 112)
			}
			add(x+"w2.weight_packed", U8, 3584, 1536)
			add(x+"w2.weight_scale", U8, 3584, 96)
		}
	}
	for i := range 168 {
		add(fmt.Sprintf("vision_tower.encoder.blocks.%d.weight", i), BF16, 1152, 1152)
	}
	return out
}

// writeSparseCheckpoint writes tensors over nShards shards whose data sections are holes (Truncate):
// headers and index are real and full size, the 1.56 TB of data costs no disk. Names must need no JSON
// escaping (K3's do not); the JSON is appended by hand because fmt and encoding/json would make writing
// the fixture take longer than the test.
func writeSparseCheckpoint(tb testing.TB, dir string, tensors []tt, nShards int) {
	tb.Helper()
	index := []byte(`{"metadata":{"total_size":0},"weight_map":{`)
	sep := ""
	per := (len(tensors) + nShards - 1) / nShards
	for s := range nShards {
		part := tensors[min(s*per, len(tensors)):min((s+1)*per, len(tensors))]
		file := fmt.Sprintf("model-%05d-of-%06d.safetensors", s+1, nShards)
		b := []byte(`{"__metadata__":{"format":"pt"}`)
		var off int64
		for _, x := range part {
			n := x.dtype.Size()
			b = append(b, `,"`+x.name+`":{"dtype":"`+string(x.dtype)+`","shape":[`...)
			for i, d := range x.shape {
				if i > 0 {
					b = append(b, ',')
				}
				b = strconv.AppendInt(b, d, 10)
				n *= d
			}
			b = append(b, `],"data_offsets":[`...)
			b = strconv.AppendInt(b, off, 10)
			b = append(b, ',')
			b = strconv.AppendInt(b, off+n, 10)
			b = append(b, "]}"...)
			off += n
			index = append(index, sep+`"`+x.name+`":"`+file+`"`...)
			sep = ","
		}
		raw := rawShard(string(append(b, '}')), nil)
		writeFile(tb, dir, file, raw)
		if err := os.Truncate(filepath.Join(dir, file), int64(len(raw))+off); err != nil {
			tb.Skipf("no sparse files here: %v", err)
		}
	}
	writeFile(tb, dir, IndexFile, append(index, "}}"...))
}

// TestOpenK3Layout opens a full-size K3 layout (96 sparse shards, 497,220 tensors) and checks the counts
// K3_SPEC gives. It also shows Open's speed; BenchmarkOpenK3 measures it.
func TestOpenK3Layout(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 130 MB of headers and index")
	}
	tensors := k3Layout()
	if len(tensors) != 497_220 {
		t.Fatalf("layout has %d tensors, K3_SPEC says 497,220", len(tensors))
	}
	dir := t.TempDir()
	writeSparseCheckpoint(t, dir, tensors, 96)
	start := time.Now()
	d, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	t.Logf("Open: %v for %d tensors in %d shards", time.Since(start), d.Len(), len(d.Summary().Shards))
	var specs []Spec
	for _, x := range tensors {
		if !strings.HasPrefix(x.name, "vision_tower.") {
			specs = append(specs, Spec{Name: x.name, DType: x.dtype, Shape: x.shape})
		}
	}
	start = time.Now()
	if err := d.Check(specs, "vision_tower.", "mm_projector."); err != nil {
		t.Error(err)
	}
	t.Logf("Check: %v for %d specs", time.Since(start), len(specs))
	var expert int64
	for _, w := range []string{"w1", "w2", "w3"} {
		for _, k := range []string{"weight_packed", "weight_scale"} {
			tn, _ := d.Lookup("language_model.model.layers.1.block_sparse_moe.experts.0." + w + "." + k)
			expert += tn.Size
		}
	}
	if expert != 17_547_264 {
		t.Errorf("one expert is %d bytes, K3_SPEC says 17,547,264", expert)
	}
}

// BenchmarkOpenK3 opens the full K3 layout: 96 headers (about 75 MB of JSON) and the index (about 60 MB).
func BenchmarkOpenK3(b *testing.B) {
	dir := b.TempDir()
	writeSparseCheckpoint(b, dir, k3Layout(), 96)
	for b.Loop() {
		d, err := Open(dir)
		if err != nil {
			b.Fatal(err)
		}
		d.Close()
	}
	b.ReportMetric(float64(b.Elapsed().Seconds())/float64(b.N), "s/open")
}

// BenchmarkReadInto reads one 64 MiB tensor per iteration; SetBytes makes -bench report MB/s. Buffered
// reads of a file just written come from the page cache (memory bandwidth through the copy); direct
// reads go to the device.
func BenchmarkReadInto(b *testing.B) {
	const size = 64 << 20
	dir := b.TempDir()
	writeFile(b, dir, SingleFile, shardBytes([]tt{{name: "w", dtype: U8, shape: []int64{size}, data: make([]byte, size)}}))
	for _, direct := range []bool{false, true} {
		b.Run(fmt.Sprint("direct=", direct), func(b *testing.B) {
			d, err := Open(dir, WithDirectIO(direct))
			if err != nil {
				b.Fatal(err)
			}
			defer d.Close()
			tn, _ := d.Lookup("w")
			dst := make([]byte, tn.Size)
			b.SetBytes(tn.Size)
			for b.Loop() {
				if err := d.ReadInto(context.Background(), tn, dst); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkDecodeMXFP4 decodes one K3 w1 matrix (3072 x 3584); bytes are the packed plus scale bytes read.
func BenchmarkDecodeMXFP4(b *testing.B) {
	const rows, cols = 3072, 3584
	pw, sw := MXFP4RowBytes(cols)
	packed, scales := make([]byte, rows*pw), make([]byte, rows*sw)
	for i := range scales {
		scales[i] = 120
	}
	dst := make([]float32, rows*cols)
	b.SetBytes(int64(len(packed) + len(scales)))
	for b.Loop() {
		if err := DecodeMXFP4(dst, packed, scales, rows, cols); err != nil {
			b.Fatal(err)
		}
	}
}
