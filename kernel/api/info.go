package api

import "time"

// Health is the answer of PathHealth: enough for a client to tell that the engine it reached is the one
// it expects (a notebook checks PID against its state file before reusing or stopping a server).
type Health struct {
	Status  string `json:"status"` // "ok", or "stopping" during a graceful shutdown
	Version string `json:"version"`
	PID     int    `json:"pid"`
}

// Info describes the model the server replays and the limits it enforces.
type Info struct {
	// ModelDir is the model directory on the engine's machine, which a notebook talking to an engine
	// elsewhere ($POTATO_ADDR) cannot read: what a notebook needs of the model comes from the engine
	// (Info's shape fields, the topk_tokens column that names the top-k ids).
	ModelDir     string `json:"model_dir"`
	ConfigSHA256 string `json:"config_sha256"`
	// WeightsSHA256 is the checkpoint's fingerprint (a hash of its tensor tables and a sample of its data,
	// replay.Engine.WeightsSHA256): it tells apart two checkpoints that share a config.json.
	WeightsSHA256 string `json:"weights_sha256,omitempty"`
	EngineVersion string `json:"engine_version"`
	Backend       string `json:"backend"`
	// Precision is the default for requests that do not say; Precisions are all that are accepted, and
	// Open those with an engine open now (the others open on first use).
	Precision  string      `json:"precision"`
	Precisions []string    `json:"precisions"`
	Open       []string    `json:"open"`
	Layers     int         `json:"layers"`
	Vocab      int         `json:"vocab"`
	Hidden     int         `json:"hidden"`
	LayerKinds []LayerKind `json:"layer_kinds"`
	// Experts is the number of routed experts of each MoE layer (text_config.num_experts: 896 on K3), the
	// range of the router table's expert_ids; ExpertsPerToken how many of them each token is routed to
	// (num_experts_per_token: 16 on K3), the length of each expert_ids list. Named apart from the top-k
	// alternatives a request asks for (Limits.MaxTopK), which are next tokens, not experts.
	Experts         int    `json:"experts"`
	ExpertsPerToken int    `json:"experts_per_token"`
	Tokenizer       bool   `json:"tokenizer"` // false: only token ids are accepted, and topk_tokens lists are empty
	Limits          Limits `json:"limits"`
}

// LayerKind is one layer's attention ("kda" or "mla") and FFN ("dense" or "moe").
type LayerKind struct {
	Layer int    `json:"layer"`
	Attn  string `json:"attn"`
	FFN   string `json:"ffn"`
}

// Limits are what one request may ask; a request past one is refused with the limit's flag named.
type Limits struct {
	MaxBodyBytes      int64 `json:"max_body_bytes"`      // --max-body-bytes
	MaxSequenceTokens int   `json:"max_sequence_tokens"` // --max-tokens
	MaxRequestTokens  int   `json:"max_request_tokens"`  // --max-request-tokens
	MaxSequences      int   `json:"max_sequences"`       // --max-sequences
	MaxTopK           int   `json:"max_top_k"`           // --max-top-k
	MaxWaveTokens     int   `json:"max_wave_tokens"`     // --max-wave-tokens (a larger request runs alone, in passes of at most this; a longer sequence is refused)
	// MaxResultBytes bounds the host memory a request's results, and a wave's, hold until written: the
	// results, their tables and the Parquet writer's working memory, as tables.Shape.Estimate counts
	// them (--max-result-bytes; by default half the memory available when the server started).
	MaxResultBytes int64 `json:"max_result_bytes"`
}

// Error is the body of every 4xx and 5xx answer.
type Error struct {
	Error string `json:"error"`
	// Limit is the flag of the limit a refused request passed, when that is why it was refused.
	Limit string `json:"limit,omitempty"`
}

// State is the state file a server started for notebooks writes once it listens (potato serve
// --state-file), so that later cells find it: where it listens and which process it is.
type State struct {
	Addr    string    `json:"addr"` // "unix:/path" or "http://127.0.0.1:port"
	PID     int       `json:"pid"`
	Started time.Time `json:"started"`
	Model   string    `json:"model"`
	// Source is the checkout the engine was compiled from (SourceRoot); "" for a build without file
	// paths, and in state files of engines before it.
	Source string `json:"source,omitempty"`
}
