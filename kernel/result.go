package kernel

import (
	"context"
	"errors"
	"fmt"
	"html"
	"io"
	"net/http"
	"slices"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/janpfeifer/gonb/gonbui"

	"github.com/potato-k3/potato-k3/internal/arrowend"
	"github.com/potato-k3/potato-k3/internal/numtext"
	"github.com/potato-k3/potato-k3/kernel/api"
	"github.com/potato-k3/potato-k3/kernel/display"
)

// Result holds the tables of one finished job as Arrow records, one record per table (the batches the
// engine sent, concatenated). Columns are documented in package replay/tables; the schema metadata
// says which model, engine version, precision and backend computed them. Release it when done: after
// Release every table accessor returns nil, Summary says the result was released, and MessageLogprob is
// an error that says so. A result of the package-level ReplayCached or Replay also holds the client they
// opened, which Release closes.
type Result struct {
	Status api.JobStatus // the job as it finished: id, wave, options, config hash
	// FromCache is set when ReplayCached read the result from the results cache instead of replaying.
	FromCache bool
	tables    map[string]arrow.RecordBatch
	released  bool // Release was called: the tables are gone
	// owned is closed by Release, once: the client that the package-level ReplayCached or Replay opened
	// for this result (cell.go); nil for a result of a method, whose caller closes its own client.
	owned io.Closer
}

// Tokens is the per-token table: seq_id, pos, token_id, token, message, channel, target_id, logprob,
// rank, entropy, topk_ids, topk_tokens (the text of each top-k id), topk_logprobs, conversation and
// thinking. A result from Replay, ReplayCached or Fetch always has it: it is nil only after Release.
func (r *Result) Tokens() arrow.RecordBatch { return r.tables["tokens"] }

// Lens is the logit-lens table (nil unless Lens or LensAll was asked, and after Release).
func (r *Result) Lens() arrow.RecordBatch { return r.tables["lens"] }

// Hidden is the hidden-state table (nil unless Hidden was asked, and after Release).
func (r *Result) Hidden() arrow.RecordBatch { return r.tables["hidden"] }

// Router is the expert-choice table (nil unless Router was asked, and after Release).
func (r *Result) Router() arrow.RecordBatch { return r.tables["router"] }

// AttnRes is the AttnRes mixing-weight table (nil unless AttnRes was asked, and after Release).
func (r *Result) AttnRes() arrow.RecordBatch { return r.tables["attnres"] }

// Table is the table called name (one of api.Tables), nil when the job did not capture it, when name is
// not a table's (a typo such as "lense" is nil too), and after Release. LookupTable tells these apart.
func (r *Result) Table(name string) arrow.RecordBatch { return r.tables[name] }

// Errors of LookupTable, for errors.Is.
var (
	// ErrNoTable: the name is none of api.Tables (a typo); the error lists the names.
	ErrNoTable = errors.New("kernel: no table")
	// ErrNotCaptured: the table exists, but the job did not ask for it; the error names the Arg that does.
	ErrNotCaptured = errors.New("not captured")
)

// tableArgs names the Arg that captures each table but tokens, which every job has.
var tableArgs = map[string]string{"lens": "Lens or LensAll", "hidden": "Hidden", "router": "Router", "attnres": "AttnRes"}

// LookupTable is Table with the reason when there is no record: an error wrapping ErrNoTable when name
// is not a table's (`kernel: no table "lense": the tables are tokens, lens, hidden, router, attnres`),
// one wrapping ErrNotCaptured when the job did not capture it (naming the tables it has and the Arg that
// asks for it), and one that says so after Release.
func (r *Result) LookupTable(name string) (arrow.RecordBatch, error) {
	if !slices.Contains(api.Tables, name) {
		return nil, fmt.Errorf("%w %q: the tables are %s", ErrNoTable, name, strings.Join(api.Tables, ", "))
	}
	if r.released {
		return nil, fmt.Errorf("kernel: the result of job %s was released: its tables are gone (Fetch or replay again)", r.Status.ID)
	}
	if rec := r.tables[name]; rec != nil {
		return rec, nil
	}
	var has []string
	for _, n := range api.Tables {
		if r.tables[n] != nil {
			has = append(has, n)
		}
	}
	return nil, fmt.Errorf("kernel: table %s %w by job %s (it has %s): ask for it with %s",
		name, ErrNotCaptured, r.Status.ID, strings.Join(has, ", "), tableArgs[name])
}

// Release releases every table and, for a result of the package-level ReplayCached or Replay, closes
// the client they opened. It is safe to call more than once, and on a nil *Result (so that a
// `defer res.Release()` written before the error check does not panic when Replay failed).
func (r *Result) Release() {
	if r == nil {
		return
	}
	for name, rec := range r.tables {
		rec.Release()
		delete(r.tables, name)
	}
	r.released = true
	if r.owned != nil {
		r.owned.Close() // a Client's Close always returns nil
		r.owned = nil
	}
}

// Summary is one line about the result: job, sequences, tokens, precision, the other jobs that shared
// its pass over the weights (if any), the tables (or, after Release, that it was released). It gives no
// wave number: the engine numbers its waves from its start, so that a job that ran alone would read
// "wave 7" after six earlier cells (Status.Wave.ID has it, to match the engine's log).
func (r *Result) Summary() string {
	st := r.Status
	s := fmt.Sprintf("job %s · %s · %s · %s", st.ID, numtext.Count(st.Sequences, "sequence"), numtext.Count(st.Tokens, "token"), st.Precision)
	if w := st.Wave; w != nil && len(w.Jobs) > 1 {
		s += fmt.Sprintf(" · one pass over the weights with %s (%s in all)", numtext.Count(len(w.Jobs)-1, "other job"), numtext.Count(w.Tokens, "token"))
	}
	var names []string
	for _, name := range api.Tables {
		if r.tables[name] != nil {
			names = append(names, name)
		}
	}
	if r.released {
		s += " · released (its tables are freed: Fetch or replay again)"
	} else {
		s += " · tables: " + strings.Join(names, ", ")
	}
	if r.FromCache {
		s += " · from the results cache"
	}
	return s
}

// HTML renders the summary and the first rows of the tokens table, the cell output of Display. It is a
// pure function of the result, for tests and for writing reports.
func (r *Result) HTML() string {
	return fmt.Sprintf(`<div style="font-family:sans-serif;font-size:12px;color:#444;margin:4px 0">%s</div>`,
		html.EscapeString(r.Summary())) + display.HTMLTable(r.Tokens(), display.DefaultMaxRows)
}

// Display shows HTML in the current GoNB cell; outside a notebook it does nothing.
func (r *Result) Display() {
	gonbui.DisplayHTML(r.HTML())
	gonbui.Sync() // delivered before the cell's program can exit (display.Display says why)
}

// Fetch reads every table of a done job (it may have finished long ago, or before a restart of the
// engine: results wait on the engine's disk until fetched). It may be called again: the engine keeps a
// job's results for its --keep period after they were first fetched in full.
//
// It is an error, with nothing returned, when id is empty; when the engine does not know the job (a
// *ServerError of status 404: never submitted, forgotten, or past its keep period); when the job is
// queued or running (Wait for it first), or failed or cancelled (the error has the engine's reason); and
// when a table does not arrive whole. If ctx ends first, the error says so and that the results are
// still on the engine.
func (c *Client) Fetch(ctx context.Context, id string) (*Result, error) {
	st, err := c.Status(ctx, id)
	if err != nil {
		return nil, err
	}
	switch st.State {
	case api.StateDone:
	case api.StateQueued, api.StateRunning:
		return nil, fmt.Errorf("kernel: job %s is %s, not done yet: Wait(ctx, %q) for it, then Fetch", id, st.State, id)
	default:
		return nil, fmt.Errorf("kernel: job %s is %s, not done: %s", id, st.State, st.Error)
	}
	r := &Result{Status: st, tables: map[string]arrow.RecordBatch{}}
	for _, name := range st.Tables {
		rec, err := c.fetchTable(ctx, id, name)
		if err != nil {
			r.Release()
			if ctx.Err() != nil {
				return nil, fmt.Errorf("kernel: job %s is done and its results stay on the engine (fetch them later with Fetch(ctx, %q)): table %s: %w", id, id, name, err)
			}
			return nil, err
		}
		r.tables[name] = rec
	}
	if r.Tokens() == nil {
		r.Release()
		return nil, fmt.Errorf("kernel: job %s: the engine sent no tokens table", id)
	}
	if err := r.checkRows(); err != nil {
		r.Release()
		return nil, fmt.Errorf("kernel: job %s: %w: Fetch it again", id, err)
	}
	return r, nil
}

// fetchTable reads one table's Arrow IPC stream into one record.
func (c *Client) fetchTable(ctx context.Context, id, name string) (arrow.RecordBatch, error) {
	resp, err := c.request(ctx, http.MethodGet, api.TablePath(id, name), nil)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	rec, err := readStream(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("kernel: job %s: table %s: %w", id, name, err)
	}
	// Read to its end-of-stream marker: confirm, so that the engine counts the table as fetched (and
	// starts keeping it for --keep only). A failed confirmation loses nothing: the results stay longer.
	if ack, err := c.request(ctx, http.MethodPost, api.ReceivedPath(id, name), nil); err == nil {
		ack.Body.Close()
	}
	return rec, nil
}

// readStream reads one Arrow IPC stream to its end-of-stream marker into one record. A stream without
// the marker is an error: arrow-go's reader takes a clean end of its input between messages as the end
// of the stream, so a file cut short (or a connection closed early, but cleanly) would otherwise read as
// a whole table with fewer rows, or none.
func readStream(r io.Reader) (arrow.RecordBatch, error) {
	schema, recs, err := arrowend.ReadAll(r)
	if err != nil {
		return nil, err
	}
	defer func() {
		for _, r := range recs {
			r.Release()
		}
	}()
	return concat(schema, recs)
}

// checkRows checks that the tokens table holds a row per token of the job, as the engine builds it.
func (r *Result) checkRows() error {
	if got, want := r.Tokens().NumRows(), int64(r.Status.Tokens); got != want {
		return fmt.Errorf("the tokens table has %d rows, but the job has %d tokens", got, want)
	}
	return nil
}

// concat joins record batches of one schema into one record, so that a cell indexes columns directly.
func concat(schema *arrow.Schema, recs []arrow.RecordBatch) (arrow.RecordBatch, error) {
	if len(recs) == 1 {
		recs[0].Retain()
		return recs[0], nil
	}
	mem := memory.DefaultAllocator
	if len(recs) == 0 {
		b := array.NewRecordBuilder(mem, schema)
		defer b.Release()
		return b.NewRecordBatch(), nil
	}
	cols := make([]arrow.Array, schema.NumFields())
	defer func() {
		for _, c := range cols {
			if c != nil {
				c.Release()
			}
		}
	}()
	var rows int64
	for _, r := range recs {
		rows += r.NumRows()
	}
	for i := range cols {
		parts := make([]arrow.Array, len(recs))
		for k, r := range recs {
			parts[k] = r.Column(i)
		}
		col, err := array.Concatenate(parts, mem)
		if err != nil {
			return nil, fmt.Errorf("column %s: %w", schema.Field(i).Name, err)
		}
		cols[i] = col
	}
	return array.NewRecordBatch(schema, cols, rows), nil
}
