package ops

// ElementLimit is implemented by a backend whose tensors hold a bounded number of elements (the CUDA
// backend: 2^34, what an op's input and output in float32 leave room for on an H200). The engine bounds
// its waves so that no activation passes the limit: a larger request runs as several waves, with the same
// results.
type ElementLimit interface {
	// MaxElements is the largest rows x cols a tensor may have.
	MaxElements() int64
}
