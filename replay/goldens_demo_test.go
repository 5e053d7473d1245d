package replay

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/potato-k3/potato-k3/replay/demomodel"
	"github.com/potato-k3/potato-k3/replay/ops"
)

// The demo model (replay/demomodel, the embedded default) has its own committed goldens from k3_ref:
// a trained model is the well-conditioned case the agreement criteria are meant for.
var demoGoldenDir = filepath.Join("testdata", "goldens", "demo")

// demoMeta identifies the demo model a golden was computed on.
type demoMeta struct {
	Model  string `json:"model"`
	Digest string `json:"digest"` // demomodel.Digest (synth.DirDigest of the directory)
}

// demoModel writes the embedded demo model into a fresh directory.
func demoModel(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	if err := demomodel.Write(dir); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestWriteDemoGoldenInputs writes input.json and meta.json for the demo model's goldens (only with
// -write-golden-inputs); k3_ref/README.md gives the command that then writes the goldens.
func TestWriteDemoGoldenInputs(t *testing.T) {
	if !*writeInputs {
		t.Skip("run with -write-golden-inputs to rewrite the golden inputs")
	}
	if err := os.MkdirAll(demoGoldenDir, 0o755); err != nil {
		t.Fatal(err)
	}
	in, _ := json.Marshal(map[string]any{"sequences": goldenInputs(t)})
	meta, _ := json.MarshalIndent(demoMeta{Model: "replay/demomodel", Digest: demomodel.Digest}, "", "  ")
	for name, data := range map[string][]byte{"input.json": in, "meta.json": meta} {
		if err := os.WriteFile(filepath.Join(demoGoldenDir, name), append(data, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestGoldensDemo holds the engine to k3_ref on the demo model with checkGolden's criteria (TestGoldens).
func TestGoldensDemo(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(demoGoldenDir, "meta.json"))
	if err != nil {
		t.Fatalf("golden %s: %v (see k3_ref/README.md)", demoGoldenDir, err)
	}
	var meta demoMeta
	if err := json.Unmarshal(raw, &meta); err != nil {
		t.Fatalf("%s/meta.json: %v", demoGoldenDir, err)
	}
	if meta.Digest != demomodel.Digest {
		t.Fatalf("%s: the goldens were computed on demo model %s but the embedded one is %s: regenerate them (k3_ref/README.md)",
			demoGoldenDir, meta.Digest[:12], demomodel.Digest[:12])
	}
	model := demoModel(t)
	a, rel := compareGolden(t, model, demoGoldenDir, ops.FP32)
	t.Logf("demo fp32: rel err per layer %.2g; top-1 %.4f, mean |dlogprob| %.2g, router sets differing %.4f",
		rel, a.top1(), a.meanAbs(), a.flips())
	checkGolden(t, "demo fp32", ops.FP32, a, rel)
	a, _ = compareGolden(t, model, demoGoldenDir, ops.BF16)
	t.Logf("demo bf16: %d positions: top-1 %.4f, mean |dlogprob| %.4f (max %.4f), router sets differing %.4f",
		a.positions, a.top1(), a.meanAbs(), a.maxAbs, a.flips())
	checkGolden(t, "demo bf16", ops.BF16, a, nil)
}
