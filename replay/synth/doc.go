// Package synth writes synthetic Kimi K3 checkpoints in exactly the official format, so that everything
// downstream of the files (reader, engine, benchmarks, audits) can be tested without the 1.56 TB release.
//
// # Writing a model directory
//
//	l, err := synth.Write(ctx, "/models/tiny", synth.Options{Preset: "tiny", Seed: 1})
//
// or `potato synth --preset tiny --seed 1 --out /models/tiny`. The directory holds config.json
// (model_type kimi_k3, text_config with every K3 field, a MoonViT-style vision_config, a compressed-tensors
// quantization_config), model.safetensors.index.json and shards named like the release's
// (model-00001-of-000004.safetensors: 5-digit index, 6-digit total). Tensor names, dtypes and shapes are
// model.Plan.Tensors() plus a synthetic image path (vision.go), tensors ordered by layer across the shards,
// 8-byte aligned and back to back. Every byte is a function of (preset, layers, seed): each tensor row draws
// from its own random stream keyed by (seed, tensor name, row), so rows are generated on all cores in any
// order and the output never depends on it. The files are written to a hidden temporary directory and
// renamed into place only when complete and synced; one that a writer killed mid-write left behind is
// removed by the next write of the same directory, and a live writer's never is (internal/staging).
//
// Presets (Presets lists them): tiny (8 layers, hidden 128, 16 experts with 4 active, 3,328-token
// vocabulary, 4.7 MB, for tests and goldens), small (12 layers, hidden 512, 64 experts with 8 active,
// 33,024 tokens, 200 MB, a CPU benchmark), k3-layer (K3's real dimensions for --layers N, default 4,
// with MLA at the last two; 57 GB for 4 layers) and k3-full (the release's shape: 497,220 tensors,
// 1,560,860,324,864 bytes; write it with Sparse, which leaves the data as file holes and takes 130 MB of
// disk for headers and index).
//
// # Weights that behave like a trained model's
//
// A model with i.i.d. random weights is chaotic: near-tied router scores flip expert choices between fp32
// and bf16, flips compound over the layers, and the two runs of one implementation agreed on only about
// half of the top-1 predictions. The engine's agreement tests (bf16 vs fp32, GPU vs CPU) mean nothing on
// such a model. The construction below makes small numerical differences stay small, the way training does,
// and every constant is in tuning (construct.go).
//
// Reserved hidden dims. Dim 0 is an anchor: the embedding holds anchor = 1 there and no sublayer ever writes
// it (every output projection has zero rows for the reserved dims), so in any normed sublayer input it reads
// q*anchor, where q is the embedding's share of the AttnRes mix divided by the mix's rms. Input projections
// use that column as a bias (KDA q/k, router); lm_head uses it for the unigram prior. Dims 1..E/2 hold
// the routing code (below), also written only by the embedding.
//
// Routing codes: no flips by construction. The E experts are split into k groups of E/k (k = experts per
// token); each group owns E/(2k) hidden dims, and its E/k slots are the ± directions of those dims. A token's
// embedding holds ±1 in one dim per group: its code, k slots. Each layer assigns experts to slots by its own
// permutation; expert e's router row reads its slot's dim with weight ±a and the anchor with -c, plus
// N(0, 0.4²/H) everywhere. So for any input, the token's k experts get logit about q/qTyp*2 + ctx and all
// others about q/qTyp*(2-10) + ctx or lower: a logit margin of 10 at q = qTyp that no rounding, summation
// order or 2^-9 perturbation can cross, while the weights among the chosen k (sigmoids of logits near 2)
// still vary with the input. Selection depends on the token (different tokens use different experts; a
// wave of one short sequence touches fewer experts than a wave of many) and the chosen scores stay in the
// sigmoid's sensitive range, far above the e_score_correction_bias spread (±0.02), which then cannot
// reorder the boundary. The cost: a goldens comparison cannot tell an engine that ignores the bias; a unit
// test of routing must.
//
// AttnRes anchor. Each *_res_proj has N(0, 0.5²/H) content weights (scores of sd 0.5 for any vector)
// plus, through the anchor dim that only the embedding has, a bonus for the embedding of
// log(number of other vectors) + 0.5 (± 0.5 per site; +1.5 at the output mix). The embedding keeps a
// steady share of every mix (about 0.6-0.8) at any depth, so q stays in 0.4..1.2 at every router and the
// routing margin holds, while the other blocks and the running sum still contribute context.
//
// Modest sublayers. Input projections give pre-activations of sd 1; output projections (o_proj, down_proj,
// routed_expert_up_proj, shared down_proj) are scaled so each sublayer adds rms 1/sqrt(2*block) (split
// between routed and shared experts), so a block vector (the sum of 2*block outputs) has about the norm of
// an embedding and AttnRes mixes vectors of comparable size. Measured rms of the running sum: 0.5-0.95 at
// every layer of tiny and small. RMSNorm weights are 1 + N(0, 0.05²): near 1, never exactly.
//
// KDA. q and k pre-activations have mean +1 (anchor column): after the short conv, SiLU and L2 norm they
// share a half-space, so S^T q is a stable weighted sum instead of a cancelling one and its per-head RMSNorm
// does not amplify rounding. Conv taps (t-3..t) are about 0.05, 0.1, 0.25, 0.9. A_log = log U(1, 4) per
// head (padding zero), dt_bias puts exp(A_log)*dt_bias uniform in [-7, 1] per channel: decays
// e^g from 0.996 (long memory) to 0.03, and graw (sd 0.5) moves each around that. beta = sigmoid(N(0, 1)).
//
// MLA. Scores q.k/sqrt(192) have sd 1.5: attention prefers some positions without collapsing on one.
//
// MXFP4 experts. Codes are drawn directly from the distribution of round-to-nearest E2M1 of N(0, s²), s
// solved so that the decoded weights have exactly the intended std (1/sqrt(in) for w1/w3, about
// 1/(0.6 sqrt(in)) for w2); a quarter of the groups use the next scale up with codes half as wide (scales
// vary as a quantizer's would, statistics do not). Scales sit near 2^-7..2^-5, far from 255 (NaN).
//
// Logits: a bigram model in the embedding. lm_head row v is a random content direction u_v scaled so that
// an unrelated input gives logit sd 1.2, plus the unigram prior -ln(1 + v/30) - 1 through the anchor (the
// specials far below). Token t has three successors drawn from a steeper Zipf law, with target logits
// top1 ~ U(4.8, 9), top2 = top1 - U(1.5, 3), top3 below that; its embedding content is the combination
// of the successors' u that hits those targets exactly (a 3x3 Gram solve) plus a token-specific direction
// orthogonal to them for the rest of the norm (at most 90% goes to the successors). The top-1 is then a
// chosen token well above the rest, and the entropy varies with top1 and with context: next-token
// distributions far from uniform, with a real spread across positions. Logits are centred near zero where
// bf16 is finest, because the engine rounds logits to bf16.
//
// # Measured: bf16 vs fp32 of one implementation (k3_ref)
//
// Inputs: 11 tokenized texts (Go package docs) plus one random-id and one Zipf-id sequence, 128 tokens
// each (tiny: 1,664 tokens; small: 8 sequences, 1,024), written with k3_ref/write_goldens.py and compared
// with k3_ref/compare.py on the CPU:
//
//	preset  seed  top-1   mean |dlogprob|  max    router sets differing  entropy min/median/max (uniform)
//	tiny    1..6  100%    0.0085-0.0104    <0.05  0 of 11,648 each       0.4 / 2.2-2.6 / 5.9 (8.1)
//	small   1     100%    0.0114           0.059  0 of 11,264            0.5 / 2.5 / 7.5 (10.4)
//	small   2     100%    0.0102           0.049  0 of 11,264            0.7 / 3.4 / 9.0 (10.4)
//
// At K3's dimensions (k3-layer, 3 layers: KDA+dense, KDA+MoE, MLA+MoE; 5 sequences of 64 tokens; CUDA,
// testdata/k3_layer_conditioning.py): top-1 100%, mean |dlogprob| 0.013 (max 0.074), router sets
// differing 0 of 640, smallest gap between the 16th and 17th selection score 0.39, entropy 0.7 / 3.0 /
// 10.7 (uniform 12.0). The top-1 gap over the second token is above 0.6 nats for 99% of positions in
// every run. The Go engine measures the same on its own (replay's TestWellConditioned): tiny and small,
// bf16 vs fp32 and fp32 vs fp32 with a 2^-9 relative perturbation of the input, top-1 100% and no expert
// set differing. The invariants are also unit-tested here in float64 (TestRouterMargin,
// TestSuccessorLogits).
package synth
