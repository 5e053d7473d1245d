// Package demomodel embeds the engine's default model: a small model of the Kimi K3 architecture (the
// tiny preset's shape: 8 layers, hidden 128, 16 routed experts with 4 active, the project's learned
// 3,328-token vocabulary) that was trained on real text and on conversations in the K3 chat format, so
// that what the notebooks and `potato demo` show on it (log-probabilities, entropy, logit-lens readouts,
// routing) has the structure of a model that has learned something, which a synthetic checkpoint lacks.
//
// It is stored in the official checkpoint format (safetensors shards, index, config.json, tokenizer
// files; routed experts in MXFP4) and written into the cache on first use:
//
//	dir, err := demomodel.Dir(ctx, os.Stderr) // ~/.cache/potato-k3/demo-<digest>
//
// PROVENANCE.md beside this file records how it was made: the corpus (internal/corpus) and its hashes,
// the trainer (k3_ref/train, a development tool outside the engine), steps, seed, the loss curve and the
// held-out loss before and after quantisation. The synthetic presets of package synth stay for the
// conditioning and scale tests. Results on this model say nothing about Kimi K3 itself.
package demomodel
