package replay

import "github.com/potato-k3/potato-k3/replay/model"

// residentLayers keeps layers' own weights (everything but the routed experts) uploaded on the backend
// between waves, up to a budget of their checkpoint bytes (EngineOptions.ResidentBytes): a layer kept is
// neither read nor uploaded again, so a wave streams only the routed experts of the layers kept. On an
// H200 (139 GiB) K3's 93 layers without their experts (about 1.1 GB each) fit beside the activations of
// a wave of tens of thousands of tokens. The first layers uploaded stay; nothing is evicted. Used by the
// engine's goroutine only.
type residentLayers struct {
	budget, used int64
	layers       map[int]*model.LayerWeights
}

// newResidentLayers makes the set for a budget of bytes; nil (keep none) for a budget <= 0.
func newResidentLayers(budget int64) *residentLayers {
	if budget <= 0 {
		return nil
	}
	return &residentLayers{budget: budget, layers: map[int]*model.LayerWeights{}}
}

// get returns layer i's weights when they are resident.
func (r *residentLayers) get(i int) *model.LayerWeights {
	if r == nil {
		return nil
	}
	return r.layers[i]
}

// keep takes layer i's weights (size checkpoint bytes) when the budget has room and reports whether it
// did; the caller frees them otherwise.
func (r *residentLayers) keep(i int, w *model.LayerWeights, size int64) bool {
	if r == nil || r.layers[i] != nil || r.used+size > r.budget {
		return false
	}
	r.layers[i] = w
	r.used += size
	return true
}

// bytes is the checkpoint bytes of the layers kept.
func (r *residentLayers) bytes() int64 {
	if r == nil {
		return 0
	}
	return r.used
}

// free releases every layer kept.
func (r *residentLayers) free(m *model.Model) {
	if r == nil {
		return
	}
	for i, w := range r.layers {
		m.FreeLayer(w)
		delete(r.layers, i)
	}
	r.used = 0
}
