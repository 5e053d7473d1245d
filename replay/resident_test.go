package replay

import (
	"context"
	"reflect"
	"testing"

	"github.com/potato-k3/potato-k3/replay/checkpoint"
	"github.com/potato-k3/potato-k3/replay/cpu"
	"github.com/potato-k3/potato-k3/replay/model"
	"github.com/potato-k3/potato-k3/replay/ops"
)

// TestResidentLayers: with ResidentBytes, the layers kept are neither read nor uploaded by later waves
// (their LayerBytes are 0, and the reader reads only the other layers and the experts), the first layers
// are the ones kept under a small budget, results equal an engine without it bit for bit, alone and with
// the host cache, between waves the backend holds the globals and the kept layers only, and Close frees everything.
func TestResidentLayers(t *testing.T) {
	dir := synthModel(t, "tiny", 1)
	plan, err := model.ReadFile(dir)
	if err != nil {
		t.Fatal(err)
	}
	own := ownBytes(plan)
	first, _ := plan.LayerBytes(0)
	second, _ := plan.LayerBytes(1)
	seqs := randomSequences(9, 3328, 120, 33)
	opts := Options{TopK: 2, Lens: []int{2}, Hidden: []int{4}}
	want := runOne(t, openTiny(t, ops.BF16, EngineOptions{}), Request{Sequences: seqs, Options: opts})
	for _, tc := range []struct {
		name      string
		opts      EngineOptions
		kept      int // layers that stay
		fromCache bool
	}{
		{"all layers", EngineOptions{ResidentBytes: own}, len(plan.Layers), false},
		{"two layers", EngineOptions{ResidentBytes: first + second}, 2, false},
		{"all layers and the host cache", EngineOptions{ResidentBytes: own, HostCacheBytes: 1 << 30, ExpertChunk: 3}, len(plan.Layers), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := checkpoint.Open(dir)
			if err != nil {
				t.Fatal(err)
			}
			defer d.Close()
			r := &countingReader{Dir: d}
			a := &accountingBackend{Backend: cpu.New(cpu.Options{Precision: ops.BF16})}
			e, err := NewEngine(context.Background(), plan, r, a, tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			globals := a.held
			for wave := range 2 {
				before := r.bytes.Load()
				got, st, err := e.Run(context.Background(), []Request{{Sequences: seqs, Options: opts}})
				if err != nil {
					t.Fatal(err)
				}
				if !reflect.DeepEqual(got, want) {
					t.Fatalf("wave %d: results differ from the engine without resident layers", wave)
				}
				read := r.bytes.Load() - before
				var layerBytes, expertBytes int64
				for i := range st.LayerBytes {
					layerBytes += st.LayerBytes[i]
					expertBytes += st.ExpertBytes[i]
					if wave == 1 && (st.LayerBytes[i] == 0) != (i < tc.kept) {
						t.Errorf("wave 1 layer %d: %d own bytes sent; want none exactly for the first %d layers", i, st.LayerBytes[i], tc.kept)
					}
				}
				switch {
				case wave == 0 && layerBytes != own:
					t.Errorf("wave 0: %d own bytes sent, want all %d", layerBytes, own)
				case wave == 1 && !tc.fromCache && read != layerBytes+expertBytes:
					t.Errorf("wave 1: %d bytes read for %d sent", read, layerBytes+expertBytes)
				case wave == 1 && tc.fromCache && read != 0:
					t.Errorf("wave 1: %d bytes read; want everything from the host cache", read)
				}
			}
			if e.ResidentBytes() == 0 || e.ResidentBytes() > tc.opts.ResidentBytes {
				t.Errorf("ResidentBytes %d, budget %d", e.ResidentBytes(), tc.opts.ResidentBytes)
			}
			if a.held != globals+e.ResidentBytes() {
				t.Errorf("between waves the backend holds %d bytes; want the globals' %d and the resident layers' %d", a.held, globals, e.ResidentBytes())
			}
			e.Close()
			if a.held != 0 {
				t.Errorf("after Close the backend still holds %d bytes", a.held)
			}
		})
	}
}
