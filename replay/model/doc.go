// Package model is Kimi K3's text model, written once against the backend operations of package ops:
// config.json parsing and validation, the layer plan (which attention and FFN each layer has, where the
// AttnRes blocks start), the list of tensors a config requires, and the forward pass of one layer over a
// wave of sequences.
//
// The layer lists in config.json are 1-indexed; everything here is 0-indexed. K3 has three layer kinds:
// KDA with a dense FFN (layer 0), KDA with an MoE (68 layers), MLA with an MoE (24 layers, among them the
// last two).
//
//	plan, err := model.ReadFile("/models/kimi-k3")
//	if err != nil { ... }
//	fmt.Println(plan.Count(model.MLA, model.MoE)) // 24
package model
