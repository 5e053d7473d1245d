package display

import (
	"fmt"
	"html"
	"math"
	"strings"
	"time"

	"github.com/potato-k3/potato-k3/internal/numtext"
)

// Progress is one report of a replay wave streaming through the model, as the engine sends it while a
// cell waits: how many layers are done out of how many, how big the wave is, and how many weight bytes
// have been read. It is plain data so that rendering it is a pure function.
type Progress struct {
	Title  string // what is running, for example "replay 12 conversations"; may be empty
	Layer  int    // layers finished, 0 ... Layers
	Layers int    // layers in the model (93 for K3)
	Tokens int64  // tokens in the wave
	// Bytes is the weight bytes read so far; TotalBytes, when known (> 0), is what the whole pass reads
	// and makes the ETA follow bytes rather than layers (MoE layers read far more than dense ones).
	Bytes, TotalBytes int64
	Elapsed           time.Duration // since the wave started
	Done              bool          // the wave finished: the bar is full and says so
	Err               string        // set when the wave failed; shown in place of the ETA
}

// Fraction is how much of the pass is done, in [0, 1]: by bytes when TotalBytes is known, else by layers.
// The final readout after the last layer counts as one more layer, so a pass whose layers are all done
// is not done (and its ETA not 0) until Done.
func (p Progress) Fraction() float64 {
	var f float64
	switch {
	case p.Done:
		return 1
	case p.TotalBytes > 0:
		f = float64(p.Bytes) / float64(p.TotalBytes)
		if p.Layers > 0 {
			f *= float64(p.Layers) / float64(p.Layers+1)
		}
	case p.Layers > 0:
		f = float64(p.Layer) / float64(p.Layers+1)
	}
	return math.Max(0, math.Min(1, f))
}

// Rate is the read rate in bytes per second, 0 when nothing can be said yet.
func (p Progress) Rate() float64 {
	if p.Elapsed <= 0 || p.Bytes <= 0 {
		return 0
	}
	return float64(p.Bytes) / p.Elapsed.Seconds()
}

// ETA is the time left if the rest goes as fast as what is done; ok is false before anything is done.
func (p Progress) ETA() (eta time.Duration, ok bool) {
	f := p.Fraction()
	if p.Done {
		return 0, true
	}
	if f <= 0 || p.Elapsed <= 0 {
		return 0, false
	}
	return time.Duration(float64(p.Elapsed) * (1 - f) / f), true
}

// layersDone is "17 of 93 layers done · next layer 17": a count, then the 0-based index of the next.
func layersDone(done, layers int) string {
	s := fmt.Sprintf("%d of %d layers done", done, layers)
	if done < layers {
		s += fmt.Sprintf(" · next layer %d", done)
	}
	return s
}

// Summary is the one-line text of the report: "17 of 93 layers done · next layer 17 · 12,345 tokens ·
// 41.2 GB/s · ETA 3m12s". It counts layers done, and names the next one by its index, from 0 as the
// tables do (layers 0 to 92 on K3). Once every layer is done and the final readout (logits, ranks,
// top-k) runs, it says "reading out" instead of an ETA: the time left is the readout's, which the layers'
// pace does not predict; the Done report then gives the total time. A report that knows no layer count
// (Layers 0: the job failed before the engine sent any report, such as an unknown job id) has no layers
// part, where it would read "0 of 0 layers done".
func (p Progress) Summary() string {
	var parts []string
	if p.Layers > 0 {
		parts = append(parts, layersDone(p.Layer, p.Layers))
	}
	if p.Tokens > 0 {
		parts = append(parts, numtext.Count(p.Tokens, "token"))
	}
	if r := p.Rate(); r > 0 {
		parts = append(parts, formatRate(r))
	}
	switch eta, ok := p.ETA(); {
	case p.Err != "":
		parts = append(parts, "failed: "+p.Err)
	case p.Done:
		parts = append(parts, "done in "+formatDuration(p.Elapsed))
	case p.Layers > 0 && p.Layer >= p.Layers:
		parts = append(parts, "reading out")
	case ok:
		parts = append(parts, "ETA "+formatDuration(eta))
	default:
		parts = append(parts, "ETA …")
	}
	return strings.Join(parts, " · ")
}

// ProgressHTML renders p as a bar with its summary line. It is pure: the same report always gives the
// same HTML, so a test can check it, and ProgressBar only sends it to the notebook.
func ProgressHTML(p Progress) string {
	pct := 100 * p.Fraction()
	color := "#4a90d9"
	switch {
	case p.Err != "":
		color = "#c0392b"
	case p.Done:
		color = "#2e8b57"
	}
	var b strings.Builder
	b.WriteString(`<div style="font-family:sans-serif;font-size:12px;max-width:760px;margin:4px 0">`)
	if p.Title != "" {
		fmt.Fprintf(&b, `<div style="font-weight:bold">%s</div>`, html.EscapeString(p.Title))
	}
	fmt.Fprintf(&b, `<div style="background:#e6e6e6;border-radius:3px;height:12px;overflow:hidden">`+
		`<div style="background:%s;height:12px;width:%.1f%%"></div></div>`, color, pct)
	fmt.Fprintf(&b, `<div style="color:#444">%s</div></div>`, html.EscapeString(p.Summary()))
	return b.String()
}

// formatRate writes bytes per second with an SI prefix: 41.2 GB/s.
func formatRate(bps float64) string {
	units := []string{"B/s", "kB/s", "MB/s", "GB/s", "TB/s"}
	u := 0
	for bps >= 1000 && u < len(units)-1 {
		bps /= 1000
		u++
	}
	if bps >= 1000 { // past the largest unit: %.3g would switch to an exponent
		return fmt.Sprintf("%.0f %s", bps, units[u])
	}
	return fmt.Sprintf("%.3g %s", bps, units[u])
}

// formatDuration rounds to what a person waiting reads: 850ms, 42s, 3m12s, 1h05m.
func formatDuration(d time.Duration) string {
	switch {
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Minute:
		return d.Round(time.Second).String()
	case d < time.Hour:
		d = d.Round(time.Second)
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	}
	d = d.Round(time.Minute)
	return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
}
