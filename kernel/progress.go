package kernel

import (
	"fmt"
	"io"
	"time"

	"github.com/janpfeifer/gonb/gonbui"

	"github.com/potato-k3/potato-k3/kernel/api"
	"github.com/potato-k3/potato-k3/kernel/display"
)

// view shows one job's progress: a bar that updates in place inside a GoNB cell (gonbui.IsNotebook,
// which GoNB sets for the programs it runs), a line per layer on a writer elsewhere, or nothing.
//
// The lines on a writer: one while queued (and one each time the position changes), one as the wave
// starts and after each layer but the last, and the final one. After the last layer only the readout is
// left, and the final line, which comes with it, says "N of N layers done" and the total time.
type view struct {
	id    string
	bar   *display.ProgressBar
	w     io.Writer
	shown api.Progress
}

// newView starts the display of job id's progress.
func (c *Client) newView(id string) *view {
	v := &view{id: id, w: c.progress}
	if gonbui.IsNotebook {
		v.bar = display.NewProgressBar()
	}
	return v
}

// update shows p if it says something new: a change of state, layer or queue position (the engine also
// reports a new rate or plan, which a line per report would repeat).
func (v *view) update(p api.Progress) {
	if p.State == v.shown.State && p.Layer == v.shown.Layer && p.QueuePosition == v.shown.QueuePosition {
		return
	}
	v.shown = p
	switch {
	case v.bar != nil:
		v.bar.Update(displayProgress(p))
	case v.w == nil || p.State.Terminal():
	case p.State == api.StateQueued:
		// not "0 of N layers done", which the wave's first line says again
		fmt.Fprintf(v.w, "%s\n", displayProgress(p).Title)
	case p.Layers > 0 && p.Layer >= p.Layers: // the readout: the final line follows
	default:
		fmt.Fprintf(v.w, "job %s: %s\n", v.id, displayProgress(p).Summary())
	}
}

// finish shows the last report as the cell's permanent output.
func (v *view) finish(p api.Progress) {
	d := displayProgress(p)
	switch {
	case v.bar != nil:
		v.bar.Finish(d)
	case v.w != nil:
		fmt.Fprintf(v.w, "job %s: %s\n", v.id, d.Summary())
	}
}

// fail shows why waiting stopped, over the last report shown when p is empty (no report came).
func (v *view) fail(p api.Progress, err error) {
	if p.State == "" {
		p = v.shown
	}
	if p.Error == "" {
		p.Error = err.Error()
	}
	v.finish(p)
}

// displayProgress turns the engine's report into the display package's.
func displayProgress(p api.Progress) display.Progress {
	d := display.Progress{Layer: p.Layer, Layers: p.Layers, Tokens: int64(p.Tokens), Bytes: p.BytesRead,
		Elapsed: time.Duration(p.ElapsedSeconds * float64(time.Second)), Done: p.State == api.StateDone,
		Err: p.Error}
	switch p.State {
	case api.StateQueued:
		d.Title = fmt.Sprintf("job %s queued", p.ID)
		if p.QueuePosition > 0 {
			d.Title += fmt.Sprintf(" (position %d)", p.QueuePosition)
		}
	case api.StateRunning:
		// not the wave's number: the engine counts waves from its start, so a job alone in its first
		// wave would read "wave 7" after six earlier cells
		d.Title = fmt.Sprintf("job %s running", p.ID)
	case api.StateCancelled:
		d.Title = fmt.Sprintf("job %s cancelled", p.ID)
	default:
		d.Title = fmt.Sprintf("job %s %s", p.ID, p.State)
	}
	return d
}
