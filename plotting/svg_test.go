package plotting

import (
	"bytes"
	"encoding/base64"
	"encoding/xml"
	"image"
	"image/color"
	"image/png"
	"io"
	"strings"
	"testing"
)

// svgDoc is what the tests read back from a rendered figure, without comparing against a golden file:
// the texts, the style of every path, and the embedded images decoded.
type svgDoc struct {
	texts  []string
	styles []string // style attribute of each <path>
	images []image.Image
}

// parseSVG parses data as XML (failing the test if it is not well-formed) and collects its parts.
func parseSVG(t *testing.T, data []byte) svgDoc {
	t.Helper()
	var doc svgDoc
	dec := xml.NewDecoder(bytes.NewReader(data))
	inText := false
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("SVG is not well-formed XML: %v", err)
		}
		switch el := tok.(type) {
		case xml.StartElement:
			switch el.Name.Local {
			case "text":
				inText = true
				doc.texts = append(doc.texts, "")
			case "path":
				doc.styles = append(doc.styles, attr(el, "style"))
			case "image":
				href := attr(el, "href")
				_, b64, ok := strings.Cut(href, "base64,")
				if !ok {
					t.Fatalf("image without base64 data: %.40s", href)
				}
				raw, err := base64.StdEncoding.DecodeString(b64)
				if err != nil {
					t.Fatalf("image data: %v", err)
				}
				img, err := png.Decode(bytes.NewReader(raw))
				if err != nil {
					t.Fatalf("embedded image is not a PNG: %v", err)
				}
				doc.images = append(doc.images, img)
			}
		case xml.EndElement:
			if el.Name.Local == "text" {
				inText = false
			}
		case xml.CharData:
			if inText {
				doc.texts[len(doc.texts)-1] += string(el)
			}
		}
	}
	if len(doc.texts) == 0 && len(doc.styles) == 0 {
		t.Fatalf("empty SVG")
	}
	return doc
}

func attr(el xml.StartElement, name string) string {
	for _, a := range el.Attr {
		if a.Name.Local == name {
			return a.Value
		}
	}
	return ""
}

// hasText reports whether some <text> element reads exactly s.
func (d svgDoc) hasText(s string) bool {
	for _, t := range d.texts {
		if t == s {
			return true
		}
	}
	return false
}

// strokeColors returns the distinct stroke colours of the paths other than black (axes, ticks).
func (d svgDoc) strokeColors() map[string]bool {
	out := map[string]bool{}
	for _, s := range d.styles {
		for _, part := range strings.Split(s, ";") {
			if c, ok := strings.CutPrefix(part, "stroke:"); ok && c != "#000000" && c != "none" {
				out[c] = true
			}
		}
	}
	return out
}

// fills counts the paths filled with colour c.
func (d svgDoc) fills(c color.RGBA) int {
	want := "fill:" + hexColor(c)
	n := 0
	for _, s := range d.styles {
		for _, part := range strings.Split(s, ";") {
			if part == want {
				n++
			}
		}
	}
	return n
}

func hexColor(c color.RGBA) string {
	const digits = "0123456789ABCDEF"
	b := []byte{'#', 0, 0, 0, 0, 0, 0}
	for i, v := range []uint8{c.R, c.G, c.B} {
		b[1+2*i], b[2+2*i] = digits[v>>4], digits[v&15]
	}
	return string(b)
}

// svgOf returns a function that renders a figure and parses it, failing the test on any error; call it
// as svgOf(t)(EntropyByLayer(...)).
func svgOf(t *testing.T) func(*Figure, error) svgDoc {
	return func(f *Figure, err error) svgDoc {
		t.Helper()
		f = figOf(t)(f, err)
		svg, err := f.SVG()
		if err != nil {
			t.Fatal(err)
		}
		return parseSVG(t, svg)
	}
}

// figOf returns a function that fails the test on err and returns f.
func figOf(t *testing.T) func(*Figure, error) *Figure {
	return func(f *Figure, err error) *Figure {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
}

// checkTexts fails the test for each of want that no <text> element reads.
func checkTexts(t *testing.T, d svgDoc, want ...string) {
	t.Helper()
	for _, w := range want {
		if !d.hasText(w) {
			t.Errorf("SVG has no text %q (has %q)", w, d.texts)
		}
	}
}

// cellColor is the colour at the centre of cell (row r from the bottom, column c) of a heatmap image
// with rows x cols cells.
func cellColor(img image.Image, rows, cols, r, c int) color.RGBA {
	kx, ky := img.Bounds().Dx()/cols, img.Bounds().Dy()/rows
	x, y := c*kx+kx/2, (rows-1-r)*ky+ky/2
	return color.RGBAModel.Convert(img.At(x, y)).(color.RGBA)
}

// heatmapImage returns the one embedded image of a heatmap figure and checks its size against the grid.
func heatmapImage(t *testing.T, d svgDoc, rows, cols int) image.Image {
	t.Helper()
	// The colour bar is an image too; the heatmap is the first drawn.
	if len(d.images) != 2 {
		t.Fatalf("want 2 images (heatmap and colour bar), got %d", len(d.images))
	}
	img := d.images[0]
	if w, h := img.Bounds().Dx(), img.Bounds().Dy(); w != cols*cellPixels(cols) || h != rows*cellPixels(rows) {
		t.Fatalf("heatmap image %dx%d, want %d cols x %d px by %d rows x %d px",
			w, h, cols, cellPixels(cols), rows, cellPixels(rows))
	}
	return img
}

// luminance orders colours from dark to light (viridis rises in luminance).
func luminance(c color.RGBA) float64 {
	return 0.2126*float64(c.R) + 0.7152*float64(c.G) + 0.0722*float64(c.B)
}
