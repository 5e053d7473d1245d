package api

import (
	"encoding/json"
	"net/url"
	"time"
)

// Endpoint paths. Job ids are 16 lower-case hex digits; table names are those of Tables.
const (
	PathHealth = "/v1/health" // GET: Health
	PathInfo   = "/v1/info"   // GET: Info
	PathJobs   = "/v1/jobs"   // POST a Request: 202 and a JobStatus; GET: every job's JobStatus
)

// Media types of the bodies.
const (
	ContentTypeJSON   = "application/json"
	ContentTypeNDJSON = "application/x-ndjson" // one Progress object a line
	ContentTypeArrow  = "application/vnd.apache.arrow.stream"
)

// Tables are the names of the result tables, in the order a job lists them (replay/tables.TableNames).
var Tables = []string{"tokens", "lens", "hidden", "router", "attnres"}

// JobPath is a job's status (GET) and the place to forget it (DELETE: cancels it if unfinished and
// removes its results).
func JobPath(id string) string { return PathJobs + "/" + url.PathEscape(id) }

// ProgressPath streams a job's Progress as newline-delimited JSON until the job is done, failed or
// cancelled. Dropping the stream does not cancel the job.
func ProgressPath(id string) string { return JobPath(id) + "/progress" }

// CancelPath cancels a queued or running job (POST). It is the only way to cancel one.
func CancelPath(id string) string { return JobPath(id) + "/cancel" }

// TablePath is one result table of a finished job as an Arrow IPC stream (GET).
func TablePath(id, table string) string { return JobPath(id) + "/tables/" + url.PathEscape(table) }

// ReceivedPath confirms that a client read a table's stream to its end (POST, 204): only then does the
// table count as fetched (JobStatus.Fetched), and once every table has, the keep period starts. A server
// cannot tell a client that read all of a stream from one that hung up with the last megabytes still in
// the sockets' buffers. A client that never confirms leaves the results until it deletes the job.
func ReceivedPath(id, table string) string { return TablePath(id, table) + "/received" }

// Request is one replay request: its inputs, in the order their results are numbered (seq_id), and what
// to capture. Unknown fields are refused.
type Request struct {
	Inputs []Input `json:"inputs"`
	// Thinking is the thinking mode of every conversation that does not give its own "thinking". A
	// conversation with neither is refused: the model's output depends on it. A request without a
	// conversation may not give it (text and token ids have no thinking mode).
	Thinking *bool   `json:"thinking,omitempty"`
	Options  Options `json:"options"`
	// Label is free text shown with the job (a notebook's name for it); it changes nothing. One longer
	// than MaxLabelBytes is refused (400, naming the field and the limit).
	Label string `json:"label,omitempty"`
}

// MaxLabelBytes bounds Request.Label. A label is echoed in the job's status, in every job list and in
// its manifest on the server's disk, so without a bound one request could make every later GET /v1/jobs
// carry megabytes; 256 bytes holds any name a person gives a job. It is part of the wire format, not a
// server flag: every server refuses the same labels, and a client checks before sending.
const MaxLabelBytes = 256

// Input is one sequence to replay: exactly one of its fields is set.
type Input struct {
	// Text is raw text, tokenized with no BOS; special-token names in it are plain text.
	Text *string `json:"text,omitempty"`
	// Conversation is one conversation in the common chat shape that package datasets reads:
	// {"messages": [{"role", "content", "reasoning_content", "tool_calls", ...}], "thinking": bool,
	// "thinking_effort", "add_generation_prompt"}, rendered with the K3 chat format. Unknown keys inside
	// a conversation are refused, as in a dataset file ("metadata" is ignored).
	Conversation json.RawMessage `json:"conversation,omitempty"`
	// Tokens are token ids, replayed as they are.
	Tokens []int32 `json:"tokens,omitempty"`
}

// TextInput is an Input of raw text.
func TextInput(s string) Input { return Input{Text: &s} }

// Options choose what a job captures beyond the per-token statistics. Precision alone changes the
// computation, and so every number; the others change only what is captured and how it is stored
// (Float16 rounds the hidden vectors), never the values of another table or of another job in the wave.
type Options struct {
	TopK    int   `json:"top_k,omitempty"`    // alternatives kept per position
	Hidden  []int `json:"hidden,omitempty"`   // layers (0-indexed) whose hidden state is returned
	Lens    []int `json:"lens,omitempty"`     // layers read out with the logit lens
	LensAll bool  `json:"lens_all,omitempty"` // every layer through the logit lens (with or instead of Lens)
	Router  bool  `json:"router,omitempty"`   // every MoE layer's expert choices
	AttnRes bool  `json:"attnres,omitempty"`  // every AttnRes mix's weights
	// Precision is "bf16" or "fp32"; empty means the server's --precision.
	Precision string `json:"precision,omitempty"`
	Float16   bool   `json:"float16,omitempty"` // hidden vectors as float16 instead of float32
}

// JobState is where a job is in its life. Done, Failed and Cancelled are terminal.
type JobState string

// The job states.
const (
	StateQueued    JobState = "queued"    // waiting for a wave
	StateRunning   JobState = "running"   // in the wave in flight, or writing its results
	StateDone      JobState = "done"      // results spilled and ready to fetch
	StateFailed    JobState = "failed"    // Error says why
	StateCancelled JobState = "cancelled" // by a client's cancel, or a DELETE
)

// Terminal reports whether a job in state s will not change state again.
func (s JobState) Terminal() bool {
	return s == StateDone || s == StateFailed || s == StateCancelled
}

// JobStatus describes one job.
type JobStatus struct {
	ID        string     `json:"id"`
	State     JobState   `json:"state"`
	Label     string     `json:"label,omitempty"`
	Created   time.Time  `json:"created"`
	Started   *time.Time `json:"started,omitempty"`
	Finished  *time.Time `json:"finished,omitempty"`
	Sequences int        `json:"sequences"`
	Tokens    int        `json:"tokens"`
	Precision string     `json:"precision"`
	Options   Options    `json:"options"`
	// QueuePosition is 1 for the next queued job, 2 for the one after, ...; 0 once it is not queued.
	QueuePosition int `json:"queue_position,omitempty"`
	// Wave is the wave the job rode in, once it has started.
	Wave     *Wave     `json:"wave,omitempty"`
	Progress *Progress `json:"progress,omitempty"`
	// Tables are the tables of a done job that can be fetched; Fetched those fetched in full at least once.
	Tables  []string `json:"tables,omitempty"`
	Fetched []string `json:"fetched,omitempty"`
	// Expires is when a fetched (or failed, or cancelled) job's results and status will be removed.
	Expires      *time.Time `json:"expires,omitempty"`
	ConfigSHA256 string     `json:"config_sha256,omitempty"`
	Error        string     `json:"error,omitempty"`
}

// Wave accounts for one pass over the weights that several jobs may share.
type Wave struct {
	// ID numbers the waves of one server process from 1; jobs with the same ID rode together. After a
	// restart numbering starts again, so compare IDs only together with Server (the process start time).
	ID        int64     `json:"id"`
	Server    time.Time `json:"server"`
	Jobs      []string  `json:"jobs"` // the jobs in the wave, in queue order
	Sequences int       `json:"sequences"`
	Tokens    int       `json:"tokens"`
	BytesRead int64     `json:"bytes_read,omitempty"` // weight bytes the wave read (once it finished)
	Seconds   float64   `json:"seconds,omitempty"`
}

// Progress is one report of a job, as the progress stream sends it (one JSON object a line).
type Progress struct {
	ID             string   `json:"id"`
	State          JobState `json:"state"`
	QueuePosition  int      `json:"queue_position,omitempty"`
	Wave           int64    `json:"wave,omitempty"`
	Layer          int      `json:"layer"`  // layers done in the job's wave
	Layers         int      `json:"layers"` // layers in the model
	Tokens         int      `json:"tokens"` // tokens in the wave (the job's own while queued)
	BytesRead      int64    `json:"bytes_read"`
	BytesPerSecond float64  `json:"bytes_per_second"`
	ElapsedSeconds float64  `json:"elapsed_s"`
	ETASeconds     float64  `json:"eta_s"`          // naive: remaining layers at the mean time per layer so far
	Plan           string   `json:"plan,omitempty"` // the wave's plan: reads, slices, where the state lives, device peak
	Error          string   `json:"error,omitempty"`
}
