package plotting

import "github.com/janpfeifer/gonb/gonbui"

// The only file that talks to GoNB; outside a notebook these calls do nothing.

// Display shows the figure as SVG in the current notebook cell.
func (f *Figure) Display() error {
	svg, err := f.SVG()
	if err != nil {
		return err
	}
	gonbui.DisplaySvg(string(svg))
	gonbui.Sync() // delivered before the cell's program can exit, which would lose what is in the pipe
	return nil
}

// DisplayHTML shows HTML made by this package (a LogprobStrip) in the current notebook cell.
func DisplayHTML(html string) {
	gonbui.DisplayHTML(html)
	gonbui.Sync()
}
