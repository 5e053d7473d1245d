package synth

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/potato-k3/potato-k3/replay/checkpoint"
	"github.com/potato-k3/potato-k3/replay/model"
)

// The release's totals (K3_SPEC.md sections 1 and 2).
const (
	k3Tensors      = 497_220
	k3Bytes        = 1_560_860_324_864
	k3TextTensors  = 497_052
	k3TextBytes    = 1_559_965_606_912
	k3VisionBytes  = 894_717_952
	k3VisionCount  = 168
	k3Shards       = 96
	k3ShardPattern = "model-%05d-of-000096.safetensors"
)

// TestManifestMatchesPlan checks every preset's tensors against model.Plan.Tensors(): the same names,
// dtypes and shapes, nothing missing, nothing extra but the image path.
func TestManifestMatchesPlan(t *testing.T) {
	for _, p := range Presets() {
		t.Run(p.Name, func(t *testing.T) {
			l, err := NewLayout(p, 0, 1)
			if err != nil {
				t.Fatal(err)
			}
			want := map[string]checkpoint.Spec{}
			for _, s := range l.Plan.Tensors() {
				want[s.Name] = s
			}
			seen := 0
			for _, s := range l.Specs() {
				if model.Ignored(s.Name) {
					continue
				}
				w, ok := want[s.Name]
				if !ok {
					t.Fatalf("tensor %s is not in the plan", s.Name)
				}
				if w.DType != s.DType || !slices.Equal(w.Shape, s.Shape) {
					t.Fatalf("tensor %s: want %s, got %s", s.Name, w, s)
				}
				seen++
			}
			if seen != len(want) {
				t.Fatalf("%d text tensors written, the plan has %d", seen, len(want))
			}
		})
	}
}

// TestK3FullTotals checks the full layout against the release: counts, bytes, shard names, layer kinds.
func TestK3FullTotals(t *testing.T) {
	p, err := LookupPreset("k3-full")
	if err != nil {
		t.Fatal(err)
	}
	l, err := NewLayout(p, 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	n, bytes := l.Totals()
	if n != k3Tensors || bytes != k3Bytes {
		t.Errorf("totals: got %d tensors, %d bytes; want %d, %d", n, bytes, k3Tensors, k3Bytes)
	}
	var vn int
	var vb int64
	for _, s := range l.Specs() {
		if model.Ignored(s.Name) {
			vn++
			vb += s.Bytes()
		}
	}
	if vn != k3VisionCount || vb != k3VisionBytes {
		t.Errorf("image path: got %d tensors, %d bytes; want %d, %d", vn, vb, k3VisionCount, k3VisionBytes)
	}
	if n-vn != k3TextTensors || bytes-vb != k3TextBytes {
		t.Errorf("text: got %d tensors, %d bytes; want %d, %d", n-vn, bytes-vb, k3TextTensors, k3TextBytes)
	}
	if len(l.Shards) != k3Shards {
		t.Fatalf("%d shards, want %d", len(l.Shards), k3Shards)
	}
	for i, sh := range l.Shards {
		if want := fmt.Sprintf(k3ShardPattern, i+1); sh.File != want {
			t.Errorf("shard %d is %s, want %s", i, sh.File, want)
		}
	}
	if got := len(l.Plan.LayerIndices(model.KDA)); got != 69 {
		t.Errorf("%d KDA layers, want 69", got)
	}
	wantMLA := []int{}
	for i := 3; i < 92; i += 4 {
		wantMLA = append(wantMLA, i)
	}
	wantMLA = append(wantMLA, 92)
	if got := l.Plan.LayerIndices(model.MLA); !slices.Equal(got, wantMLA) {
		t.Errorf("MLA layers %v, want %v", got, wantMLA)
	}
}

// TestLayerLists checks the truncated layer pattern: every kind present from three layers on, the last
// two MLA from four layers on, and K3's own list at 93.
func TestLayerLists(t *testing.T) {
	for _, tc := range []struct {
		n    int
		want []int // 0-indexed MLA layers
	}{
		{1, nil}, {2, nil}, {3, []int{2}}, {4, []int{2, 3}}, {8, []int{3, 6, 7}}, {12, []int{3, 7, 10, 11}},
	} {
		_, full := layerLists(tc.n)
		var got []int
		for _, l := range full {
			got = append(got, l-1)
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("%d layers: MLA at %v, want %v", tc.n, got, tc.want)
		}
	}
	k3 := model.K3TextConfig()
	kda, full := layerLists(93)
	if !slices.Equal(kda, k3.LinearAttn.KDALayers) || !slices.Equal(full, k3.LinearAttn.FullAttnLayers) {
		t.Errorf("93 layers: lists differ from K3TextConfig")
	}
}

// TestShardLayout checks the layout of every preset: shards in write order (layers ascending, each
// layer contiguous), data back to back from offset 0, 8-byte aligned, and headers that parse with the
// reader's parser to exactly the placed tensors.
func TestShardLayout(t *testing.T) {
	for _, p := range Presets() {
		t.Run(p.Name, func(t *testing.T) {
			l, err := NewLayout(p, 0, 1)
			if err != nil {
				t.Fatal(err)
			}
			lastLayer := -1
			for _, sh := range l.Shards {
				if len(sh.Header)%8 != 0 || binary.LittleEndian.Uint64(sh.Header) != uint64(len(sh.Header)-8) {
					t.Fatalf("%s: header of %d bytes is not 8-aligned or has a wrong length prefix", sh.File, len(sh.Header))
				}
				var next int64
				for _, x := range sh.Tensors {
					if x.Begin != next || x.Begin%8 != 0 {
						t.Fatalf("%s: tensor %s begins at %d, want %d (8-aligned)", sh.File, x.Name, x.Begin, next)
					}
					next += x.Bytes()
					if i := layerOf(x.Name); i >= 0 {
						if i < lastLayer {
							t.Fatalf("%s: tensor %s of layer %d after layer %d", sh.File, x.Name, i, lastLayer)
						}
						lastLayer = i
					}
				}
				if sh.Size != int64(len(sh.Header))+next {
					t.Fatalf("%s: size %d, want %d", sh.File, sh.Size, int64(len(sh.Header))+next)
				}
				if p.Name == "k3-full" && sh.File != l.Shards[0].File && sh.File != l.Shards[len(l.Shards)-1].File {
					continue // parsing all 96 headers is the reader's test; two suffice here
				}
				checkHeader(t, sh)
			}
		})
	}
}

// checkHeader parses sh's header with the checkpoint reader (on a virtual file of sh.Size bytes) and
// with encoding/json, and compares both to the placed tensors.
func checkHeader(t *testing.T, sh Shard) {
	t.Helper()
	h, err := checkpoint.ParseHeader(sh.File, headerFile(sh.Header), sh.Size)
	if err != nil {
		t.Fatalf("reader refuses the header: %v", err)
	}
	if len(h.Tensors) != len(sh.Tensors) || h.DataStart != int64(len(sh.Header)) {
		t.Fatalf("%s: reader sees %d tensors from %d, want %d from %d", sh.File, len(h.Tensors), h.DataStart, len(sh.Tensors), len(sh.Header))
	}
	for i, x := range h.Tensors {
		w := sh.Tensors[i]
		if x.Name != w.Name || x.DType != w.DType || !slices.Equal(x.Shape, w.Shape) || x.Offset != h.DataStart+w.Begin {
			t.Fatalf("%s: tensor %d is %s, want %s at %d", sh.File, i, x, w.Spec, w.Begin)
		}
	}
	var js map[string]json.RawMessage
	if err := json.Unmarshal(sh.Header[8:], &js); err != nil {
		t.Fatalf("%s: header is not JSON: %v", sh.File, err)
	}
	if string(js["__metadata__"]) != `{"format":"pt"}` || len(js) != len(sh.Tensors)+1 {
		t.Fatalf("%s: header has %d keys and metadata %s", sh.File, len(js), js["__metadata__"])
	}
}

// headerFile is an io.ReaderAt over a header, reading zeros past it (the data section).
type headerFile []byte

func (h headerFile) ReadAt(p []byte, off int64) (int, error) {
	n := 0
	if off < int64(len(h)) {
		n = copy(p, h[off:])
	}
	clear(p[n:])
	return len(p), nil
}

// layerOf returns the layer index in a tensor name, or -1.
func layerOf(name string) int {
	rest, ok := strings.CutPrefix(name, model.TextPrefix+"layers.")
	if !ok {
		return -1
	}
	var i int
	fmt.Sscanf(rest, "%d.", &i)
	return i
}

// TestPresetErrors checks the refusals of bad requests.
func TestPresetErrors(t *testing.T) {
	if _, err := LookupPreset("huge"); err == nil || !strings.Contains(err.Error(), "tiny") {
		t.Errorf("unknown preset: got %v, want an error listing the presets", err)
	}
	full, _ := LookupPreset("k3-full")
	if _, err := full.TextConfig(4); err == nil {
		t.Error("k3-full with 4 layers: no error")
	}
	tiny, _ := LookupPreset("tiny")
	if _, err := tiny.TextConfig(-1); err == nil {
		t.Error("-1 layers: no error")
	}
}
