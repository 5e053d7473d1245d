package ops

// QuietMixer is an optional interface of a Backend: AttnResMix without its mixing weights, for a pass
// whose observer keeps none. A device backend hands the weights back with a copy that waits for the
// device (the CUDA backend: a device-to-host copy at every mix, two a layer and slice), so the host
// stops queueing work until the mix is done and the device then idles while the host catches up.
// Without the weights the host goes on queueing the ops after the mix while it runs. The model uses it
// when the backend implements it and nothing will read the weights.
//
// Contract: AttnResMixQuiet(vs, wg) returns, bit for bit, the first result of AttnResMix(vs, wg) on the
// same backend, and fails where it fails; it keeps no reference to its arguments.
type QuietMixer interface {
	AttnResMixQuiet(vs []Tensor, wg Tensor) (Tensor, error)
}

// MixNormer is an optional interface of a Backend: an AttnRes mix and the RMSNorm that reads it as one
// op. Every mix in K3 is normed at once (input_layernorm, post_attention_layernorm, the readout's norm)
// and read by nothing else, so a device backend need not write the mix out and read it back: at K3's
// width that is two passes over a [tokens, 7168] float32 tensor at each site. The model uses it when the
// backend implements it.
//
// Contract: AttnResMixNorm(vs, wg, w, eps, weights) returns, bit for bit, RMSNorm(AttnResMix(vs, wg), w,
// eps) of the same backend, and AttnResMix's weights when weights is set (else nil: the mix is quiet, as
// QuietMixer's); it fails where they fail and keeps no reference to its arguments.
type MixNormer interface {
	AttnResMixNorm(vs []Tensor, wg, w Tensor, eps float32, weights bool) (Tensor, []float32, error)
}
