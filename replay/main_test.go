package replay

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/potato-k3/potato-k3/replay/checkpoint"
	"github.com/potato-k3/potato-k3/replay/model"
	"github.com/potato-k3/potato-k3/replay/synth"
)

var (
	presetsDir string
	presetOnce sync.Map // preset+seed -> *presetDir
)

type presetDir struct {
	once sync.Once
	path string
	err  error
}

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "replay-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	presetsDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// synthModel writes a synthetic preset once per test binary and returns its directory.
func synthModel(t testing.TB, preset string, seed uint64) string {
	t.Helper()
	v, _ := presetOnce.LoadOrStore(fmt.Sprintf("%s-%d", preset, seed), &presetDir{})
	pd := v.(*presetDir)
	pd.once.Do(func() {
		pd.path = filepath.Join(presetsDir, fmt.Sprintf("%s-seed%d", preset, seed))
		_, pd.err = synth.Write(context.Background(), pd.path, synth.Options{Preset: preset, Seed: seed})
	})
	if pd.err != nil {
		t.Fatalf("synth %s seed %d: %v", preset, seed, pd.err)
	}
	return pd.path
}

// openSynth is synthModel's preset opened: its plan and its checkpoint (closed when the test ends).
func openSynth(t testing.TB, preset string, seed uint64) (*model.Plan, *checkpoint.Dir) {
	t.Helper()
	dir := synthModel(t, preset, seed)
	plan, err := model.ReadFile(dir)
	if err != nil {
		t.Fatal(err)
	}
	d, err := checkpoint.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return plan, d
}

// ownBytes is the checkpoint bytes of every layer's own tensors (its routed experts left out).
func ownBytes(plan *model.Plan) int64 {
	var own int64
	for i := range plan.Layers {
		o, _ := plan.LayerBytes(i)
		own += o
	}
	return own
}
