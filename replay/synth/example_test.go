package synth_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/potato-k3/potato-k3/replay/checkpoint"
	"github.com/potato-k3/potato-k3/replay/model"
	"github.com/potato-k3/potato-k3/replay/synth"
)

// Write the tiny preset, then open it with the checkpoint reader and check it against the layer plan.
func Example() {
	parent, err := os.MkdirTemp("", "synth-example")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(parent)
	dir := filepath.Join(parent, "tiny")

	l, err := synth.Write(context.Background(), dir, synth.Options{Preset: "tiny", Seed: 1})
	if err != nil {
		fmt.Println(err)
		return
	}
	n, bytes := l.Totals()
	fmt.Printf("%d shards, %d tensors, %d bytes\n", len(l.Shards), n, bytes)

	plan, err := model.ReadFile(dir)
	if err != nil {
		fmt.Println(err)
		return
	}
	d, err := checkpoint.Open(dir)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer d.Close()
	fmt.Println("MLA layers:", plan.LayerIndices(model.MLA))
	fmt.Println("check:", d.Check(plan.Tensors(), model.IgnoredPrefixes...))
	// Output:
	// 4 shards, 896 tensors, 4662976 bytes
	// MLA layers: [3 6 7]
	// check: <nil>
}
