package model

import (
	"fmt"
	"path/filepath"

	"github.com/potato-k3/potato-k3/replay/checkpoint"
)

// countSlack is how many tensors past twice the checkpoint's count a plan may require and still be
// compared tensor by tensor (CheckDir). Up to there the comparison names every missing tensor, which is
// what a damaged checkpoint (a shard or an index entry lost) needs, and its list costs at most a few
// times the index's own memory; past it the config cannot describe the checkpoint and is refused by count.
const countSlack = 4096

// TensorCount is len(Tensors()) and how many of those are routed experts' tensors, computed without
// building the list, so that a config whose numbers imply millions of tensors is measured before any of
// them is named.
func (p *Plan) TensorCount() (total, experts int64) {
	total = int64(len(p.GlobalTensors()))
	perExpert := int64(len(p.ExpertTensors(0, 0)))
	for i, l := range p.Layers {
		total += int64(len(p.LayerTensors(i)))
		if l.FFN == MoE {
			experts += perExpert * int64(p.Config.NumExperts)
		}
	}
	return total + experts, experts
}

// CheckDir compares checkpoint d with the tensors the plan requires (Tensors), the image path aside
// (IgnoredPrefixes), after Fit: nil when they match, else the *checkpoint.MismatchError of
// checkpoint.Dir.Check, which lists every difference. A plan that requires far more tensors than d holds
// (more than twice as many, plus countSlack) is refused first, by count, naming the config fields that
// imply them: the list is never built for a config that cannot describe the checkpoint (a num_experts of
// a billion would otherwise fill memory with expert names). Both refusals match checkpoint.ErrMismatch.
func (p *Plan) CheckDir(d *checkpoint.Dir) error {
	total, experts := p.TensorCount()
	held := int64(d.Count(IgnoredPrefixes...))
	if total > 2*held+countSlack {
		c := p.Config
		return fmt.Errorf("%w: %s: text_config.num_experts = %d over %d MoE layers (num_hidden_layers = %d) implies %d expert tensors, %d tensors in all; the checkpoint %s holds %d besides the image path",
			checkpoint.ErrMismatch, filepath.Join(d.Path(), "config.json"), c.NumExperts, p.MoELayers(), c.NumHiddenLayers, experts, total, d.Path(), held)
	}
	return d.Check(p.Tensors(), IgnoredPrefixes...)
}
