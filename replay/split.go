package replay

import (
	"slices"

	"github.com/potato-k3/potato-k3/replay/model"
	"github.com/potato-k3/potato-k3/replay/ops"
)

// split cuts a wave's outputs into per-request, per-sequence results, keeping only what each request
// asked for (a wave computes the union of its requests' options).
func split(reqs []Request, layout ops.Layout, seqs []Sequence, targets []int32, final []ops.TokenStats,
	w *waveOut, obs *capture, hiddenDim, lastLayer int) [][]Result {
	out := make([][]Result, len(reqs))
	s := 0
	for ri, req := range reqs {
		o := req.Options
		for range req.Sequences {
			lo, hi := layout.Starts[s], layout.Starts[s+1]
			seq := seqs[s]
			r := Result{
				SeqID:   int32(len(out[ri])),
				Tokens:  seq.Tokens,
				Pieces:  seq.Pieces,
				Targets: targets[lo:hi],
				Stats:   truncTopK(final[lo:hi], o.TopK),
			}
			r.Messages, r.Channels = seq.Messages, seq.Channels
			r.Conversation, r.Thinking = seq.Conversation, seq.Thinking
			for _, l := range o.Lens {
				r.Lens = append(r.Lens, LayerStats{Layer: l, Stats: truncTopK(w.lens[l][lo:hi], o.TopK)})
			}
			for _, l := range o.Hidden {
				r.Hidden = append(r.Hidden, LayerVectors{Layer: l, Dim: hiddenDim,
					Values: w.hidden[l][lo*hiddenDim : hi*hiddenDim]})
			}
			if o.Router {
				for _, lr := range obs.routing {
					k := lr.r.K
					r.Router = append(r.Router, LayerRouting{Layer: lr.layer, K: k,
						IDs: lr.r.IDs[lo*k : hi*k], Weights: lr.r.Weights[lo*k : hi*k]})
				}
			}
			if o.AttnRes {
				for _, m := range obs.mixList {
					// a lens readout after layer L takes the output mix at L: keep only this request's
					// lens layers and the model's own output, as when it is replayed alone
					if m.site == model.SiteOutput && m.layer != lastLayer && !slices.Contains(o.Lens, m.layer) {
						continue
					}
					r.Mixes = append(r.Mixes, Mix{Layer: m.layer, Site: string(m.site), N: m.n,
						Weights: m.weights[lo*m.n : hi*m.n]})
				}
			}
			out[ri] = append(out[ri], r)
			s++
		}
	}
	return out
}

// truncTopK returns stats with at most k alternatives each (a wave computes the largest k any request
// asked for; the top-k lists are sorted, so a prefix is the smaller request's answer).
func truncTopK(stats []ops.TokenStats, k int) []ops.TokenStats {
	out := make([]ops.TokenStats, len(stats))
	for i, s := range stats {
		s.TopIDs, s.TopLogp = s.TopIDs[:min(k, len(s.TopIDs))], s.TopLogp[:min(k, len(s.TopLogp))]
		out[i] = s
	}
	return out
}
