// Package opstest is the conformance suite every ops.Backend runs (gonum's and gomlx's one shared suite):
//
//	func TestConformance(t *testing.T) {
//		opstest.RunAll(t, func(p ops.Precision) ops.Backend { return cpu.New(cpu.Options{Precision: p}) })
//	}
//
// It checks every op in both precisions against straightforward float64 loops written here, independently
// of any backend, with a tolerance that grows with the value (llm.c): |got - ref| <= tolAbs + |ref| * eps,
// eps about 1e-6 in FP32 and 1e-2 in BF16 (a bfloat16 ulp is 2^-8 to 2^-7 of the value), tolAbs eps times
// the RMS of the reference. The references round to bfloat16 at the contract's "rounded" points in BF16
// precision, so the error left is float32 against float64 arithmetic plus the odd one-ulp flip where the
// two land on either side of a rounding boundary. Because such flips are rare, a BF16 output must also be
// made of bfloat16 values and equal the reference exactly in all but 2% of its values: a skipped or an
// extra rounding point moves far more, though each by less than the tolerance. Long float32 sums (MatMul
// over k) and mixes of cancelling terms (AttnResMix, large softmax scores) get a tolAbs that grows with
// sqrt(k) or with the magnitude of the terms, each stated where it is used. On failure a check reports
// the max abs and rel error, the worst index with both values, and the worst error as a percentage of its
// tolerance; with -v every check logs the same figures.
//
// Besides the tolerance checks it asserts properties that must hold bit for bit: batch invariance (each
// sequence's rows of a wave equal the op run on that sequence alone, for every op), GatedRMSNorm equal to
// MulSigmoid(RMSNorm), ExpertsAccumulate over disjoint ascending expert subsets equal to one call, exact
// tie-breaks of Route and TokenStats, BF16 outputs that are bfloat16 values where the contract rounds. It
// checks the KDA reference itself against a chunked form (chunks of 64 with the intra-chunk triangular
// solve) and MLA against a masked full softmax, decodes the public MXFP4 golden row through UploadExpert,
// and expects errors, not panics, from bad shapes and freed tensors.
//
// Inputs come from seeded generators (the same bits every run) and are never all zeros, so an output the
// backend forgot to write cannot pass. Results are read through ToHost only, so a device backend runs the
// suite unchanged.
package opstest
