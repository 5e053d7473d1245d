package replay

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"testing"

	"github.com/potato-k3/potato-k3/datasets"
	"github.com/potato-k3/potato-k3/replay/ops"
	"github.com/potato-k3/potato-k3/replay/synth"
	"github.com/potato-k3/potato-k3/replay/tokenizer"
)

// The committed goldens: k3_ref (the independent PyTorch reference) run on synthetic tiny models.
// k3_ref/README.md says how to regenerate them; goldenMeta ties each to the exact checkpoint bytes.
var goldenSeeds = []uint64{1, 2}

var writeInputs = flag.Bool("write-golden-inputs", false, "rewrite testdata/goldens/*/input.json and meta.json from the current tokenizer and synth")

// goldenMeta identifies what a golden was computed on.
type goldenMeta struct {
	Preset       string `json:"preset"`
	Seed         uint64 `json:"seed"`
	SynthVersion int    `json:"synth_version"`
	ModelSHA256  string `json:"model_sha256"` // over config.json and every shard, in name order
}

func goldenDir(seed uint64) string {
	return filepath.Join("testdata", "goldens", "tiny-seed"+string(rune('0'+seed)))
}

// modelHash is the SHA-256 of a model directory's config.json and shards, in name order.
func modelHash(t testing.TB, dir string) string {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(dir, "model-*.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(names)
	h := sha256.New()
	for _, n := range append([]string{filepath.Join(dir, "config.json")}, names...) {
		f, err := os.Open(n)
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(h, filepath.Base(n))
		if _, err := io.Copy(h, f); err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	return hex.EncodeToString(h.Sum(nil))
}

// goldenInputs are the sequences the goldens replay: the first bundled example conversations rendered in
// the K3 chat format with the tiny preset's vocabulary, and a raw text.
func goldenInputs(t testing.TB) [][]int32 {
	tok, err := tokenizer.Builtin(3072)
	if err != nil {
		t.Fatal(err)
	}
	var out [][]int32
	for _, c := range datasets.Examples()[:4] {
		toks, err := tok.EncodeConversation(c)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, tokenizer.IDs(toks))
	}
	out = append(out, tok.Encode("The capital of France is Paris. 你好世界! 12345 tokens, don't they?"))
	return out
}

// TestWriteGoldenInputs writes the inputs and meta for k3_ref/write_goldens.py (only with -write-golden-inputs).
func TestWriteGoldenInputs(t *testing.T) {
	if !*writeInputs {
		t.Skip("run with -write-golden-inputs to rewrite the golden inputs")
	}
	for _, seed := range goldenSeeds {
		dir := goldenDir(seed)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		in, _ := json.Marshal(map[string]any{"sequences": goldenInputs(t)})
		meta, _ := json.MarshalIndent(goldenMeta{Preset: "tiny", Seed: seed, SynthVersion: synth.Version,
			ModelSHA256: modelHash(t, synthModel(t, "tiny", seed))}, "", "  ")
		for name, data := range map[string][]byte{"input.json": in, "meta.json": meta} {
			if err := os.WriteFile(filepath.Join(dir, name), append(data, '\n'), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		t.Logf("wrote %s; now run: /usr/bin/python3 k3_ref/write_goldens.py %s %s/input.json %s",
			dir, synthModel(t, "tiny", seed), dir, dir)
	}
}

// TestGoldens holds the engine to k3_ref on the committed goldens (two seeds) with checkGolden: fp32
// relative error of the running sum <= 1e-5 at every layer and outputs and routing all but identical;
// bf16 top-1 agreement >= 99%, mean |delta logprob| <= 0.02 nats and expert sets differing <= 2%.
func TestGoldens(t *testing.T) {
	for _, seed := range goldenSeeds {
		dir := goldenDir(seed)
		raw, err := os.ReadFile(filepath.Join(dir, "meta.json"))
		if err != nil {
			t.Fatalf("golden %s: %v (see k3_ref/README.md)", dir, err)
		}
		var meta goldenMeta
		if err := json.Unmarshal(raw, &meta); err != nil {
			t.Fatalf("%s/meta.json: %v", dir, err)
		}
		model := synthModel(t, meta.Preset, meta.Seed)
		if got := modelHash(t, model); got != meta.ModelSHA256 {
			t.Fatalf("%s: the goldens were computed on model %s (synth version %d) but synth now writes %s (version %d): "+
				"regenerate them (k3_ref/README.md)", dir, meta.ModelSHA256[:12], meta.SynthVersion, got[:12], synth.Version)
		}
		a, rel := compareGolden(t, model, dir, ops.FP32)
		t.Logf("seed %d fp32: rel err per layer %.2g; top-1 %.4f, mean |dlogprob| %.2g, router sets differing %.4f",
			seed, rel, a.top1(), a.meanAbs(), a.flips())
		checkGolden(t, fmt.Sprintf("seed %d fp32", seed), ops.FP32, a, rel)
		a, _ = compareGolden(t, model, dir, ops.BF16)
		t.Logf("seed %d bf16: %d positions: top-1 %.4f, mean |dlogprob| %.4f (max %.4f), router sets differing %.4f",
			seed, a.positions, a.top1(), a.meanAbs(), a.maxAbs, a.flips())
		checkGolden(t, fmt.Sprintf("seed %d bf16", seed), ops.BF16, a, nil)
	}
}
