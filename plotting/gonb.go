package plotting

import (
	"github.com/janpfeifer/gonb/gonbui"
	"github.com/janpfeifer/gonb/gonbui/protocol"
)

// The only file that talks to GoNB. Outside a notebook (gonbui.IsNotebook false: a test, a program run
// by hand) gonbui sends nothing, so these calls show nothing.

// Display shows the figure in the current notebook cell as a PNG image (Bundle says why not SVG or HTML).
// Outside a notebook it still renders the figure, so that a drawing error is returned wherever the call
// runs, and sends nothing.
func (f *Figure) Display() error {
	data, meta, err := f.Bundle()
	if err != nil {
		return err
	}
	gonbui.SendData(&protocol.DisplayData{Data: toMIME(data), Metadata: meta})
	gonbui.Sync() // delivered before the cell's program can exit, which would lose what is in the pipe
	return nil
}

// DisplaySVG shows the figure as an SVG image (mime type image/svg+xml, not HTML): sharp at any zoom in
// Jupyter, but nbconvert 6's HTML export strips inline SVG elements (lxml's clean_html), so a notebook
// meant to be exported should use Display. Outside a notebook it renders the SVG (returning any drawing
// error) and sends nothing, as Display does.
func (f *Figure) DisplaySVG() error {
	svg, err := f.SVG()
	if err != nil {
		return err
	}
	gonbui.SendData(&protocol.DisplayData{Data: map[protocol.MIMEType]any{
		protocol.MIMEImageSVG: string(svg), protocol.MIMETextPlain: f.AltText(),
	}})
	gonbui.Sync()
	return nil
}

// DisplayHTML shows HTML made by this package (LogprobStrip's interactive version) in the current cell.
// Jupyter sanitises the HTML of a notebook it does not trust (a fresh clone) and drops its inline styles,
// hence the shading: LogprobStripFigure is the image every viewer shows. Outside a notebook it does
// nothing.
func DisplayHTML(html string) {
	gonbui.DisplayHTML(html)
	gonbui.Sync()
}

// toMIME converts a bundle's keys to GoNB's mime type.
func toMIME(data map[string]any) map[protocol.MIMEType]any {
	out := make(map[protocol.MIMEType]any, len(data))
	for k, v := range data {
		out[protocol.MIMEType(k)] = v
	}
	return out
}
