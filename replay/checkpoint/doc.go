// Package checkpoint reads a safetensors model directory (the official Kimi K3 checkpoint or a synthetic
// one in the same format) and refuses anything damaged with a message naming the file and the tensor.
//
// A directory holds model.safetensors.index.json, mapping each tensor name to a shard file, and the
// shards: an 8-byte little-endian header length, a JSON header giving each tensor's dtype, shape and byte
// span relative to the end of the header, then the data. K3 has 96 shards, 497,220 tensors and 1.56 TB.
//
// Open parses every header concurrently and validates everything before anything is read: lengths inside
// the file, spans exactly as long as their shapes need and not overlapping, index and headers agreeing
// in both directions. It takes about 0.4 s for K3 on two cores. Check then compares the directory with
// the layer plan's list of Specs and returns one *MismatchError listing every missing, mistyped, misshapen
// and unused tensor, so loading never leaves a silent hole:
//
//	d, err := checkpoint.Open(dir, checkpoint.WithDirectIO(true))
//	if err != nil { ... }                    // *FileError parts: errors.Is ErrHeader or ErrIndex
//	if err := d.Check(plan.Tensors(), "vision_tower.", "mm_projector."); err != nil { ... }
//	t, _ := d.Lookup("language_model.model.layers.1.block_sparse_moe.experts.0.w1.weight_packed")
//	err = d.ReadInto(ctx, t, buf)            // parallel positioned reads of 8 MiB segments
//
// Reads never mmap: each tensor is split into segments read with pread by a bounded set of goroutines
// shared by all callers of a Dir, optionally with O_DIRECT (aligned bounce buffers, falling back to
// buffered reads per shard where the file system refuses). ReadBatch reads many tensors at once (the
// experts a router chose); Stats counts the bytes for the engine's accounting.
//
// Decoding is exact: DecodeBF16 and DecodeF32 widen to float32, DecodeMXFP4 expands K3's routed-expert
// weights (E2M1 nibbles with one E8M0 power-of-two scale per 32 columns, K3_SPEC section 4) and refuses
// NaN scales. The encoder in mxfp4_encode.go is for tests and for the synthetic writer.
//
// Files: header.go and index.go parse (on jsonscan.go, a strict JSON scanner), dir.go opens, check.go
// and summary.go compare and describe, read.go reads (direct_*.go: O_DIRECT where Linux has it), decode.go
// and mxfp4*.go decode.
package checkpoint
