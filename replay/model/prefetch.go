package model

import (
	"context"
	"fmt"
)

// ExpertPrefetcher is an ExpertSource that can fetch some of a layer's experts before the router has
// chosen any: on a device backend their copies then run while the layer's attention computes, instead of
// after it. An Experts call for the same layer hands out the prefetched experts it asks for without
// fetching them again; Unused frees the ones no call took. Results never depend on it: the same experts
// reach ExpertsAccumulate in the same calls either way.
type ExpertPrefetcher interface {
	ExpertSource
	// Prefetch fetches experts ids (ascending) of layer `layer`, or those of them the source can fetch
	// without delaying the caller (the engine fetches only experts it holds in host memory).
	Prefetch(ctx context.Context, layer int, ids []int) error
	// Unused frees the experts of layer `layer` prefetched and not handed out.
	Unused(layer int)
}

// minCoverage is the share of a layer's experts that a wave must be expected to choose before the pass
// fetches experts ahead of the router: with T tokens choosing k of E experts each, an expert is left out
// with probability about exp(-T k / E), so a wave with T k >= 4 E leaves out under 2% of those fetched.
const minCoverage = 4

// CoversExperts reports whether a wave of tokens is expected to choose nearly every routed expert of an
// MoE layer (tokens x top-k >= minCoverage x experts): the rule that gates fetching experts before the
// router, from the host cache here and from the checkpoint in the engine.
func CoversExperts(d Dims, tokens int) bool { return tokens*d.TopK >= minCoverage*d.Experts }

// prefetch fetches the first PrefetchExperts experts (all when negative) of MoE layer w ahead of its
// router, once the layer's attention is queued, when the source can and the wave is large enough that
// nearly all of them will be chosen (and the last MoE layer of this pass did choose at least 90% of its
// experts). (Fetching them earlier, as soon as the layer before had fetched its last experts, was
// measured on the H200 and gained nothing: cuda/records/JOURNAL.md, run 10.)
func (f *Pass) prefetch(w *LayerWeights) error {
	pf, ok := f.Experts.(ExpertPrefetcher)
	if !ok || f.PrefetchExperts == 0 || w.Layer.FFN != MoE {
		return nil
	}
	d := f.Model.Dims
	if !CoversExperts(d, f.Layout.Tokens()) || (f.lastChosen > 0 && 10*f.lastChosen < 9*d.Experts) {
		return nil
	}
	n := f.PrefetchExperts
	if n < 0 || n > d.Experts {
		n = d.Experts
	}
	ids := make([]int, n)
	for i := range ids {
		ids[i] = i // the ascending order the chunks of the routed experts are fetched in
	}
	if err := pf.Prefetch(f.Ctx, w.Layer.Index, ids); err != nil {
		return fmt.Errorf("experts of layer %d fetched ahead of the router: %w", w.Layer.Index, err)
	}
	return nil
}

// unused frees the experts of layer fetched ahead and never used (at the end of the layer, however it
// ended).
func (f *Pass) unused(layer int) {
	if pf, ok := f.Experts.(ExpertPrefetcher); ok {
		pf.Unused(layer)
	}
}
