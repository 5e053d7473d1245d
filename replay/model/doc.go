// Package model is Kimi K3's text model, written once against the backend operations of package ops:
// config.json parsing and validation, the layer plan (which attention and FFN each layer has, where the
// AttnRes blocks start), the list of tensors a config requires, and the forward pass of one layer over a
// wave of sequences.
//
// Waves larger than the device: a Pass runs each layer over the wave in token slices (slicing.go), the
// token-mixing ops carrying a sequence's state across slice boundaries; the per-token state lives on the
// device or, slice by slice, in host memory (wave.go, hostbufs.go: page-locked buffers the engine keeps,
// moved by queued copies). On a device too small for a layer's routed experts beside a slice, MoE layers
// run expert-major (moe_major.go): each chunk of experts fetched once for every slice, consecutive slices
// pooled into each expert call (moe_pool.go). None of it changes a bit of the results.
//
// The layer lists in config.json are 1-indexed; everything here is 0-indexed. K3 has three layer kinds:
// KDA with a dense FFN (layer 0), KDA with an MoE (68 layers), MLA with an MoE (24 layers, among them the
// last two).
//
//	plan, err := model.ReadFile("/models/kimi-k3")
//	if err != nil { ... }
//	fmt.Println(plan.Count(model.MLA, model.MoE)) // 24
package model
