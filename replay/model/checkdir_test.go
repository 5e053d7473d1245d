package model_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/potato-k3/potato-k3/replay/checkpoint"
	"github.com/potato-k3/potato-k3/replay/model"
	"github.com/potato-k3/potato-k3/replay/synth"
)

// TestCheckDirByCount: a config whose numbers imply far more tensors than the checkpoint holds is refused
// by count, naming the fields, before its tensor list is built (num_experts = 16,000 on the tiny preset's
// checkpoint is 672,000 expert names); a config that differs by a little is compared tensor by tensor,
// each missing tensor named.
func TestCheckDirByCount(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "tiny")
	if _, err := synth.Write(context.Background(), dir, synth.Options{Preset: "tiny", Seed: 1}); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		experts int      // text_config.num_experts written
		want    []string // in the error; nil: no error
		byCount bool     // refused by count (not a *checkpoint.MismatchError)
	}{
		{"as written", 16, nil, false},
		{"one expert more", 17, []string{"missing", "experts.16.w1.weight_packed"}, false},
		{"16,000 experts", 16000, []string{"config.json: text_config.num_experts = 16000 over 7 MoE layers (num_hidden_layers = 8) implies 672000 expert tensors", "besides the image path"}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var f map[string]any
			if err := json.Unmarshal(raw, &f); err != nil {
				t.Fatal(err)
			}
			f["text_config"].(map[string]any)["num_experts"] = tc.experts
			edited, _ := json.Marshal(f)
			plan, err := model.Parse(edited)
			if err != nil {
				t.Fatal(err)
			}
			d, err := checkpoint.Open(dir)
			if err != nil {
				t.Fatal(err)
			}
			defer d.Close()
			if err := plan.Fit(d.Lookup); err != nil {
				t.Fatal(err)
			}
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			err = plan.CheckDir(d)
			runtime.ReadMemStats(&after)
			if tc.want == nil {
				if err != nil {
					t.Fatalf("CheckDir: %v", err)
				}
				return
			}
			if err == nil || !errors.Is(err, checkpoint.ErrMismatch) {
				t.Fatalf("-want an ErrMismatch +got %v", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks …%s…:\n%v", w, err)
				}
			}
			var m *checkpoint.MismatchError
			if errors.As(err, &m) == tc.byCount {
				t.Errorf("refused by count: -want %v +got %v (%v)", tc.byCount, !errors.As(err, &m), err)
			}
			if a := after.TotalAlloc - before.TotalAlloc; tc.byCount && a > 16<<20 {
				t.Errorf("refusing by count allocated %d MB: the list was built", a>>20)
			}
		})
	}
}
