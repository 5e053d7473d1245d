package cuda

// Deferred rounding: a MatMul's rounding pass left to the op that reads its output.
//
// In BF16 precision every activation holds bfloat16 values (the ops contract), so a MatMul on cuBLASLt
// rounds its float32 output in place (k_round4) before any op reads it: a read and a write of every output
// value, about 2 ms for a 76,800 x 12,288 output on the H200, 30-45 ms a K3 layer at 262,144 tokens. Most
// of those outputs are read once, by a memory-bound kernel that can round each value as it loads it: the
// short convolution (q, k, v of a KDA layer), the output gate of GatedRMSNorm and MulSigmoid, Add, the
// chunked KDA kernel's decay and beta inputs, MLA's tensor-core kernel and the experts' gather (which
// convert to bfloat16 anyway, with the same rounding). So MatMul, and the fused SiTUFFN for its down
// projection, leave their outputs unrounded (Tensor.unrounded) and:
//
//   - an op whose kernel rounds every value of an input as it loads it reads that input with raw, which
//     leaves it as it is. Rounding is idempotent (a bfloat16 value rounds to itself), so such a kernel
//     rounds in BF16 precision whether or not its input was deferred, and gives the bits it gave before;
//   - every other reader goes through f32 (or settle), which rounds the tensor in place first, once: the
//     MatMul's own rounding pass, only later on the stream;
//   - copies of rows or columns (catRows, copyRows, Slice, Gather) carry the mark to the copy;
//   - downloads settle first (ToHost; ToHostBF16 converts with the same rounding).
//
// No number changes, only where the rounding runs (a NaN may come out as the canonical NaN: kernels round
// four values at a time with the hardware conversion, common.cuh rnd4, TestRnd4Bits): TestDeferredRounding
// compares each reader with Options.EagerRounding, and the engine's TestCUDASliceInvariance compares whole
// replays against it.

// defersRounding reports whether MatMul (its cuBLASLt output) and the fused SiTUFFN leave their outputs
// unrounded for the reader to round: in BF16 precision unless Options.EagerRounding.
func (b *Backend) defersRounding() bool { return b.bf == 1 && !b.opts.EagerRounding }

// settle rounds t in place if its rounding was deferred, and widens a narrow-only t first (narrow.go):
// stream-ordered, like the op's other work.
func (c *opCtx) settle(t *Tensor) error {
	if err := c.widen(t); err != nil { // a narrow-only tensor's values (narrow.go)
		return err
	}
	if !t.unrounded || t.dt != dtF32 {
		return nil
	}
	if t.n() > 0 {
		if err := c.roundF32(t.ptr, t.ptr, t.n(), 1); err != nil {
			return err
		}
	}
	t.unrounded = false
	return nil
}

// raw returns the device address of t's values as float32 without settling a deferred rounding: only for
// kernels that round every value of this input as they load it in BF16 precision (rnd(x, bf), or a
// conversion to bfloat16 by round to nearest even). A bfloat16 weight is widened as by f32, and a
// narrow-only activation's values written from its copy (widen).
func (c *opCtx) raw(t *Tensor) (uint64, error) {
	if t.dt == dtF32 {
		return t.ptr, c.widen(t) // a narrow-only tensor's values (narrow.go)
	}
	return c.f32(t)
}

// rawAll is raw of each of ts, in order.
func (c *opCtx) rawAll(ts []*Tensor) ([]uint64, error) { return each(ts, c.raw) }
