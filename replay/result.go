package replay

import "github.com/potato-k3/potato-k3/replay/ops"

// Result is everything a replay computed for one sequence. Slices indexed by position have one entry per
// token of the sequence.
type Result struct {
	SeqID int32
	// Input, as tokenized: ids, their text pieces, and for conversations which message (-1 for none) and
	// channel each token belongs to.
	Tokens   []int32
	Pieces   []string
	Messages []int32
	Channels []string
	// Conversation and Thinking are the sequence's (Sequence.Conversation, Sequence.Thinking).
	Conversation, Thinking string
	// Targets[t] is Tokens[t+1], the id the model is scored on at position t; -1 at the last position.
	Targets []int32
	// Stats are the model's next-token statistics at every position (logprob and rank are of the target).
	Stats []ops.TokenStats
	// Lens holds, per requested layer, the logit-lens statistics at every position.
	Lens []LayerStats
	// Hidden holds, per requested layer, the running sum p after that layer: positions x hidden, row-major.
	Hidden []LayerVectors
	// Router holds, per MoE layer when requested, the chosen experts and their weights at every position.
	Router []LayerRouting
	// Mixes holds, when requested, every AttnRes mix's weights at every position.
	Mixes []Mix
}

// LayerStats are next-token statistics read out after one layer.
type LayerStats struct {
	Layer int
	Stats []ops.TokenStats
}

// LayerVectors are one vector per position captured after one layer.
type LayerVectors struct {
	Layer  int
	Dim    int
	Values []float32 // positions x Dim
}

// LayerRouting is one MoE layer's routing of a sequence: K experts per position.
type LayerRouting struct {
	Layer   int
	K       int
	IDs     []int32   // positions x K, in selection order
	Weights []float32 // positions x K
}

// Mix is one AttnRes mixing site's weights for a sequence: N weights per position over the completed block
// vectors then the running sum.
type Mix struct {
	Layer   int
	Site    string // "attn", "mlp" or "output"
	N       int
	Weights []float32 // positions x N
}
