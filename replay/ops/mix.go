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
