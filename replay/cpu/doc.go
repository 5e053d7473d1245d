// Package cpu is the pure-Go implementation of ops.Backend: the reference every other backend is checked
// against, and the embedded default that runs the small demo model (replay/demomodel) on any laptop.
//
// A Backend holds no model state of its own (only the contexts Interrupt registers); tensors are float32
// slices. Weights are decoded exactly (BF16 and
// F32 as stored, MXFP4 experts at upload); in ops.BF16 precision every value an op writes at a "rounded"
// point of the ops contract is rounded to bfloat16 (round to nearest even, bf16.Round), and in ops.FP32
// nothing is.
//
// Determinism. Each op's doc comment states the loop it computes, including the order of every sum.
// Work is split across goroutines (Options.Threads) by output element only: rows for row-wise ops,
// (sequence, head) pairs for KDA, (sequence, head, query block) for MLA, output blocks for MatMul,
// (expert, row tile) for ExpertsAccumulate. Every element is computed by one goroutine in its fixed order,
// so results are bit-identical for any thread count and for any wave a sequence shares. Products are
// rounded to float32 before they are added (explicit conversions forbid fused multiply-add), so no compiler
// or GOARCH fuses them differently. Transcendentals (exp, tanh, sigmoid, log) come from package math in
// float64 and are rounded to float32 once; math may differ in the last float64 bit between architectures,
// which moves a float32 result only in rare near-ties.
//
// Cancellation. An op runs in the calling goroutine's time, minutes for one op of a long sequence, so the
// backend implements ops.Interrupter: once a context the engine registered for its wave ends, every op
// that runs tasks (all but Gather, JoinRows, Slice, Round, Zeros, FromHost, ToHost and the uploads:
// copies, quick at any size) skips its remaining ones (KDA and MLA also stop within a task) and returns an
// error wrapping the context's, never its partial output.
//
// Quick start:
//
//	b := cpu.New(cpu.Options{Precision: ops.BF16})
//	x, _ := b.FromHost(1, 2, []float32{1, 2})
//	w, _ := b.FromHost(1, 2, []float32{3, 4})
//	y, _ := b.MatMul(x, w) // [[11]]
//
// The conformance suite in package ops/opstest checks every op against float64 loops; this package's
// tests run it in both precisions.
package cpu
