package display

import (
	"sync"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/janpfeifer/gonb/gonbui"
)

// This file is the only one that talks to GoNB. Every function here is a thin call of gonbui on HTML
// made by the pure functions of this package; outside a notebook gonbui does nothing, so these are safe
// to call from tests and programs.

// show displays html and waits until GoNB has taken it (gonbui.Sync): a cell's program that displays
// and then exits would otherwise lose what was still in the pipe (seen as tables missing from a cell's
// saved outputs, now and then, when they were its last outputs).
func show(html string) {
	gonbui.DisplayHTML(html)
	gonbui.Sync()
}

// Display shows the first maxRows rows of rec in the current notebook cell (see HTMLTable).
func Display(rec arrow.RecordBatch, maxRows int) {
	show(HTMLTable(rec, maxRows))
}

// DisplayRecords shows several record batches of one schema as one table (see HTMLRecords).
func DisplayRecords(recs []arrow.RecordBatch, maxRows int) {
	show(HTMLRecords(recs, maxRows))
}

// DisplayTable shows the first maxRows rows of an arrow.Table (see HTMLTableOf).
func DisplayTable(tbl arrow.Table, maxRows int) {
	show(HTMLTableOf(tbl, maxRows))
}

// ProgressBar is a progress display that updates in place in a notebook cell. GoNB keeps an output block
// per display id and replaces its content on each update (gonbui.UpdateHTML); the notebook saves the
// block with its last content, so Finish writes the final report into it (one output a job, where a
// cleared bar and a separate report left an empty output before each report).
//
// Updates closer together than MinInterval are dropped (the last report before Finish may be too: Finish
// always shows its own). A ProgressBar is safe for use by several goroutines.
type ProgressBar struct {
	// MinInterval is the least time between two updates sent to the notebook; 0 sends every update.
	MinInterval time.Duration

	id   string
	mu   sync.Mutex
	last time.Time
}

// NewProgressBar returns a bar with its own display id that sends at most ten updates a second.
func NewProgressBar() *ProgressBar {
	return &ProgressBar{id: "potato-progress-" + gonbui.UniqueId(), MinInterval: 100 * time.Millisecond}
}

// Update replaces the bar's content with p, unless the previous update was less than MinInterval ago.
func (b *ProgressBar) Update(p Progress) {
	b.mu.Lock()
	now := time.Now()
	if !b.last.IsZero() && now.Sub(b.last) < b.MinInterval && !p.Done {
		b.mu.Unlock()
		return
	}
	b.last = now
	b.mu.Unlock()
	gonbui.UpdateHTML(b.id, ProgressHTML(p))
}

// Finish shows p in the bar's block for good (whatever MinInterval says).
func (b *ProgressBar) Finish(p Progress) {
	gonbui.UpdateHTML(b.id, ProgressHTML(p))
	gonbui.Sync()
}
