package cuda

// FreeDeviceMemory is the device memory free now (ops.DeviceMemory): the engine plans its waves against
// it. The blocks the backend's memory pool keeps after they were freed count as free: the driver counts
// them as used, and a plan made after a large wave would otherwise see a fraction of the device (measured,
// cuda/records/run29: 57 GB of 139 after a warm-up wave of 262,144 tokens, and slices of 17,408 tokens
// where 115,712 fitted).
func (b *Backend) FreeDeviceMemory() (int64, error) {
	free, _, err := b.MemInfo()
	if err != nil {
		return 0, err
	}
	var idle int64
	err = b.ex.Do(func() error {
		var err error
		idle, err = b.dv.PoolIdle()
		return err
	})
	return free + idle, err
}

// ActivationElementBytes is the device memory one activation value takes on average at a sublayer's peak
// (ops.ActivationSizer): 4 for its float32 value, and 1 for the bfloat16 copies that norms and the first
// cuBLASLt matmul reading an input keep (narrow.go): only matmul inputs and the short convolutions'
// outputs (KDA's q, k and v, read by the chunked kernel from their copies) have one, at most about half
// the values (46% at KDA's peak in K3: the normed input and q, k, v of 95,456 values a token).
func (b *Backend) ActivationElementBytes() int { return 5 }

// ExpertScratchBytes is what ExpertsAccumulate takes beyond acc and z (ops.ExpertScratch) for a call over
// rows rows of z with pairs (row, expert) pairs: the grouped path's bfloat16 gathers of every pair's
// latent input and SiTU output (experts.go, prepareGrouped), and z's bfloat16 copy, which the cuBLASLt
// path's gather reads and which stays with z until it is freed (moe.go); the cuBLASLt lanes hold buffers
// of a bounded number of rows, counted by the plan's margin.
func (b *Backend) ExpertScratchBytes(rows, pairs, latent, ffn int) int64 {
	return 2*int64(pairs)*int64(latent+ffn) + 2*int64(rows)*int64(latent)
}
