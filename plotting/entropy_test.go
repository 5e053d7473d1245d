package plotting

import (
	"bytes"
	"errors"
	"fmt"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"gonum.org/v1/plot"
)

// lensGrid makes lens rows for seq over positions 0..npos-1 and layers 0..nlayers-1 with entropy
// pos + layer/100, so that every cell is distinct and the largest is the last position at the last layer.
func lensGrid(seq int32, npos, nlayers int) []LensRow {
	var rows []LensRow
	for p := 0; p < npos; p++ {
		for l := 0; l < nlayers; l++ {
			rows = append(rows, LensRow{SeqID: seq, Pos: int32(p), Layer: int32(l), Entropy: float64(p) + float64(l)/100})
		}
	}
	return rows
}

func TestEntropyByLayer(t *testing.T) {
	rows := append(lensGrid(0, 6, 5), lensGrid(1, 3, 5)...)
	tests := []struct {
		name       string
		opts       EntropyOptions
		wantTexts  []string
		wantCurves int
	}{
		{"three positions", EntropyOptions{Positions: []int32{0, 2, 5}},
			[]string{"Logit-lens entropy by layer (seq 0)", "layer", "entropy (nats)", "pos 0", "pos 2", "pos 5"}, 3},
		{"labels and title escape", EntropyOptions{Seq: 1, Positions: []int32{1, 2}, Labels: []string{`<b>&"x"`}, Title: "a < b"},
			[]string{"a < b", `<b>&"x"`, "pos 2"}, 2},
		{"ten", EntropyOptions{Positions: []int32{0, 1, 2, 3, 4, 5, 0, 1, 2, 3}}, []string{"pos 5"}, 10},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := svgOf(t)(EntropyByLayer(rows, tt.opts))
			checkTexts(t, d, tt.wantTexts...)
			if got := len(d.strokeColors()); got != tt.wantCurves {
				t.Errorf("curves: want %d colours, got %d (%v)", tt.wantCurves, got, d.strokeColors())
			}
		})
	}
}

// Curves of several sequences in one figure, ln V as a dashed reference, and every layer labelled.
func TestEntropyByLayerCurvesAndVocab(t *testing.T) {
	rows := append(lensGrid(0, 6, 8), lensGrid(1, 3, 8)...)
	d := svgOf(t)(EntropyByLayer(rows, EntropyOptions{Vocab: 3328,
		Curves: []Curve{{Seq: 0, Pos: 1, Label: "first"}, {Seq: 1, Pos: 2}}}))
	checkTexts(t, d, "first", "seq 1 pos 2", "ln V = 8.11: uniform over the 3,328-token vocabulary, the largest entropy",
		"0", "1", "2", "3", "4", "5", "6", "7")
	if got := len(d.strokeColors()); got < 3 {
		t.Errorf("want two curves and the reference line, got %d stroke colours", got)
	}
	if _, err := EntropyByLayer(rows, EntropyOptions{Curves: []Curve{{Seq: 5, Pos: 0}}}); !errors.Is(err, ErrInput) {
		t.Errorf("a sequence with no rows: %v", err)
	}
	ticks := LayerTicks{}.Ticks(-0.3, 92.3)
	labelled := 0
	for _, tk := range ticks {
		if tk.Label != "" {
			labelled++
		}
	}
	if len(ticks) != 93 || labelled != 19 {
		t.Errorf("93 layers: %d ticks, %d labelled; want 93 and every 5th (19)", len(ticks), labelled)
	}
}

func TestEntropyErrors(t *testing.T) {
	rows := lensGrid(0, 3, 4)
	dup := append(lensGrid(0, 1, 2), LensRow{Pos: 0, Layer: 1})
	tests := []struct {
		name string
		fn   func() (*Figure, error)
		want string
	}{
		{"no positions", func() (*Figure, error) { return EntropyByLayer(rows, EntropyOptions{}) }, "0 positions chosen"},
		{"too many", func() (*Figure, error) {
			return EntropyByLayer(rows, EntropyOptions{Positions: make([]int32, MaxCurves+1)})
		}, "11 positions chosen"},
		{"unknown seq", func() (*Figure, error) { return EntropyByLayer(rows, EntropyOptions{Seq: 7, Positions: []int32{0}}) }, "no rows for seq 7"},
		{"position without rows", func() (*Figure, error) {
			return EntropyByLayer(rows, EntropyOptions{Positions: []int32{0, 9}})
		}, "pos 9 has no lens rows"},
		{"all NaN", func() (*Figure, error) {
			return EntropyByLayer([]LensRow{{Entropy: math.NaN()}}, EntropyOptions{Positions: []int32{0}})
		}, "pos 0 has no lens rows with an entropy"},
		{"duplicate", func() (*Figure, error) { return EntropyHeatmap(dup, EntropyOptions{}) }, "layer 1 appears twice"},
		{"empty", func() (*Figure, error) { return EntropyHeatmap(nil, EntropyOptions{}) }, "no rows for seq 0 (of 0 rows)"},
		{"heatmap positions without rows", func() (*Figure, error) {
			return EntropyHeatmap(rows, EntropyOptions{Positions: []int32{8}})
		}, "no lens rows at the chosen positions"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, err := tt.fn()
			if err == nil || !errors.Is(err, ErrInput) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("want an ErrInput error containing %q, got %v", tt.want, err)
			}
			if f != nil {
				t.Errorf("a figure came with the error")
			}
		})
	}
}

func TestEntropyHeatmap(t *testing.T) {
	const npos, nlayers = 7, 5
	rows := lensGrid(0, npos, nlayers)
	rows = rows[1:] // pos 0 layer 0 has no readout: a grey cell
	d := svgOf(t)(EntropyHeatmap(rows, EntropyOptions{}))
	checkTexts(t, d, "Logit-lens entropy, layer by position (seq 0)", "position", "layer", "entropy (nats)", "6")
	img := heatmapImage(t, d, nlayers, npos)
	if got := cellColor(img, nlayers, npos, 0, 0); got != missingColor {
		t.Errorf("missing cell: want grey %v, got %v", missingColor, got)
	}
	// Entropy rises with position and with layer: so must the luminance of the cells.
	for l := 0; l < nlayers; l++ {
		for p := 1; p < npos; p++ {
			if l == 0 && p == 1 {
				continue
			}
			a, b := cellColor(img, nlayers, npos, l, p-1), cellColor(img, nlayers, npos, l, p)
			if luminance(a) >= luminance(b) {
				t.Errorf("layer %d: cell at pos %d (%v) not darker than pos %d (%v)", l, p-1, a, p, b)
			}
		}
	}

	// Chosen positions and labels become the columns, in order.
	d = svgOf(t)(EntropyHeatmap(rows, EntropyOptions{Positions: []int32{5, 2}, Labels: []string{"five", "two"}}))
	checkTexts(t, d, "five", "two")
	img = heatmapImage(t, d, nlayers, 2)
	if a, b := cellColor(img, nlayers, 2, 0, 0), cellColor(img, nlayers, 2, 0, 1); luminance(a) <= luminance(b) {
		t.Errorf("pos 5 drawn first should be brighter than pos 2: %v, %v", a, b)
	}
}

func TestFigureFiles(t *testing.T) {
	f := figOf(t)(EntropyByLayer(lensGrid(0, 2, 3), EntropyOptions{Positions: []int32{0, 1}}))
	pngData, err := f.PNG()
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(pngData))
	if err != nil {
		t.Fatal(err)
	}
	if w := img.Bounds().Dx(); w != 800 {
		t.Errorf("PNG width %d, want 800 px for a notebook", w)
	}
	dir := t.TempDir()
	for _, name := range []string{"a.svg", "b.PNG"} {
		if err := f.WriteFile(filepath.Join(dir, name)); err != nil {
			t.Errorf("%s: %v", name, err)
		}
		if st, err := os.Stat(filepath.Join(dir, name)); err != nil || st.Size() == 0 {
			t.Errorf("%s not written", name)
		}
	}
	if err := f.WriteFile(filepath.Join(dir, "c.pdf")); err == nil || !strings.Contains(err.Error(), "unknown extension") {
		t.Errorf("pdf: want unknown extension, got %v", err)
	}
	var b bytes.Buffer
	if n, err := f.WriteTo(&b); err != nil || n == 0 || !bytes.HasPrefix(b.Bytes(), []byte("<?xml")) {
		t.Errorf("WriteTo: %d bytes, %v", n, err)
	}
	if err := f.Display(); err != nil { // outside a notebook: renders, sends nothing
		t.Errorf("Display: %v", err)
	}
}

// A panic inside gonum/plot while drawing comes back as an error.
func TestFigureDrawPanics(t *testing.T) {
	f := figOf(t)(EntropyByLayer(lensGrid(0, 1, 3), EntropyOptions{Positions: []int32{0}}))
	f.Plot.X.Min, f.Plot.X.Max = math.NaN(), math.NaN()
	f.Plot.X.Tick.Marker = panicTicker{}
	if _, err := f.SVG(); err == nil || !strings.Contains(err.Error(), "plotting: drawing") {
		t.Errorf("want a drawing error, got %v", err)
	}
}

type panicTicker struct{}

func (panicTicker) Ticks(min, max float64) []plot.Tick { panic("bad ticks") }

// TestEntropyHeatmapTextLabels: token pieces as labels are turned up, one a column up to maxTurnedTicks,
// with the spaces at their ends drawn as "·" (a piece's leading space would not show).
func TestEntropyHeatmapTextLabels(t *testing.T) {
	const npos = maxTurnedTicks
	rows := lensGrid(0, npos, 3)
	labels := make([]string, npos)
	for i := range labels {
		labels[i] = fmt.Sprintf(" w%02d", i)
	}
	labels[1], labels[2] = "tail ", "  "
	d := svgOf(t)(EntropyHeatmap(rows, EntropyOptions{Labels: labels}))
	checkTexts(t, d, "·w00", "tail·", "··", "·w43")
	for i := 3; i < npos; i++ {
		checkTexts(t, d, fmt.Sprintf("·w%02d", i))
	}
	if got := visibleEnds([]string{"a b", " x ", ""}); !slices.Equal(got, []string{"a b", "·x·", ""}) {
		t.Errorf("visibleEnds: %q", got)
	}
}
