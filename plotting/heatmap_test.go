package plotting

import (
	"errors"
	"math"
	"slices"
	"strings"
	"testing"

	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

func TestAttnResHeatmap(t *testing.T) {
	// Three layers: layer 0 mixes 1 block and the partial sum, layers 1-2 mix 2 blocks and the partial sum.
	// Weights differ by position so that the mean is checkable: at pos p the first weight is 0.2 + 0.1p.
	var rows []AttnResRow
	for pos := int32(0); pos < 2; pos++ {
		a := 0.2 + 0.1*float64(pos)
		for layer := int32(2); layer >= 0; layer-- { // any order
			for _, site := range []string{"mlp", "attn"} {
				w := []float64{a, 1 - a}
				if layer > 0 {
					w = []float64{a, 0.1, 0.9 - a}
				}
				rows = append(rows, AttnResRow{Pos: pos, Layer: layer, Site: site, Weights: w})
			}
		}
	}
	rows = append(rows, AttnResRow{SeqID: 1, Pos: 0, Layer: 0, Site: "attn", Weights: []float64{1}})

	d := svgOf(t)(AttnResHeatmap(rows, AttnResOptions{}))
	checkTexts(t, d, "AttnRes mixing weights (seq 0, mean over 2 positions)", "L0 attn", "L0 mlp", "L2 mlp",
		"b0", "b1", "partial", "weight", "sublayer input")
	const nrows, ncols = 6, 3 // L0 attn, L0 mlp, L1 attn, ... ; b0, b1, partial
	img := heatmapImage(t, d, nrows, ncols)
	// Layer 0 has no second block: grey. Its partial sum (0.75 on average) sits in the last column and is
	// the largest weight of the figure, so the brightest cell.
	if got := cellColor(img, nrows, ncols, 0, 1); got != missingColor {
		t.Errorf("L0 attn b1: want grey, got %v", got)
	}
	bright := cellColor(img, nrows, ncols, 0, 2)
	for r := 0; r < nrows; r++ {
		for c := 0; c < ncols; c++ {
			if got := cellColor(img, nrows, ncols, r, c); got != missingColor && luminance(got) > luminance(bright) {
				t.Errorf("cell (%d, %d) %v brighter than the largest weight %v", r, c, got, bright)
			}
		}
	}

	d = svgOf(t)(AttnResHeatmap(rows, AttnResOptions{Seq: 0, Positions: []int32{1}}))
	checkTexts(t, d, "AttnRes mixing weights (seq 0, pos 1)")
}

func TestAttnResErrors(t *testing.T) {
	ok := AttnResRow{Layer: 0, Site: "attn", Weights: []float64{0.5, 0.5}}
	tests := []struct {
		name string
		rows []AttnResRow
		opts AttnResOptions
		want string
	}{
		{"empty", nil, AttnResOptions{}, "no attnres rows for seq 0"},
		{"positions not there", []AttnResRow{ok}, AttnResOptions{Positions: []int32{3}}, "at the chosen positions"},
		{"no weights", []AttnResRow{{Layer: 1, Site: "mlp"}}, AttnResOptions{}, "layer 1 mlp: no weights"},
		{"lengths differ", []AttnResRow{ok, {Pos: 1, Site: "attn", Weights: []float64{1, 0, 0}}}, AttnResOptions{},
			"layer 0 attn: 3 weights at pos 1, 2 at an earlier position"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := AttnResHeatmap(tt.rows, tt.opts)
			if !errors.Is(err, ErrInput) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("want an ErrInput containing %q, got %v", tt.want, err)
			}
		})
	}
}

func TestCountExperts(t *testing.T) {
	rows := []RouterRow{
		{Pos: 0, Layer: 3, ExpertIDs: []int32{0, 5}},
		{Pos: 1, Layer: 3, ExpertIDs: []int32{5, 2}},
		{SeqID: 1, Pos: 0, Layer: 1, ExpertIDs: []int32{5, 1}},
	}
	u, err := CountExperts(rows, 0)
	if err != nil {
		t.Fatal(err)
	}
	wantLayers := []int32{1, 3}
	wantCounts := [][]int{{0, 1, 0, 0, 0, 1}, {1, 0, 1, 0, 0, 2}}
	if !slices.Equal(u.Layers, wantLayers) || len(u.Counts) != 2 || !slices.Equal(u.Counts[0], wantCounts[0]) ||
		!slices.Equal(u.Counts[1], wantCounts[1]) || !slices.Equal(u.Tokens, []int{1, 2}) {
		t.Errorf("(-want +got):\n-%v %v [1 2]\n+%v %v %v", wantLayers, wantCounts, u.Layers, u.Counts, u.Tokens)
	}
	if u, _ := CountExperts(rows, 896); len(u.Counts[0]) != 896 {
		t.Errorf("numExperts 896: rows of %d", len(u.Counts[0]))
	}

	errs := []struct {
		name string
		rows []RouterRow
		n    int
		want string
	}{
		{"empty", nil, 8, "no router rows"},
		{"no ids", []RouterRow{{Layer: 1}}, 0, "no expert ids"},
		{"out of range", []RouterRow{{Pos: 4, Layer: 2, ExpertIDs: []int32{8}}}, 8, "pos 4 layer 2: expert id 8 outside [0, 8)"},
		{"negative", []RouterRow{{ExpertIDs: []int32{-1}}}, 8, "expert id -1"},
		{"twice", []RouterRow{{ExpertIDs: []int32{3, 1, 3}}}, 8, "expert 3 chosen twice"},
	}
	for _, tt := range errs {
		if _, err := CountExperts(tt.rows, tt.n); !errors.Is(err, ErrInput) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: want an ErrInput containing %q, got %v", tt.name, tt.want, err)
		}
	}
}

func TestExpertUsageHeatmap(t *testing.T) {
	// 896 experts and 4 layers; expert e at layer i was chosen (e % 7) + i times; expert 3 never at layer 0.
	u := ExpertUsage{Layers: []int32{1, 2, 5, 9}, Tokens: []int{10, 10, 10, 10}}
	for i := range u.Layers {
		row := make([]int, 896)
		for e := range row {
			row[e] = e%7 + i
		}
		u.Counts = append(u.Counts, row)
	}
	u.Counts[0][3] = 0
	d := svgOf(t)(ExpertUsageHeatmap(u, ""))
	checkTexts(t, d, "Routed expert usage (4 layers, 10 tokens)", "expert", "layer", "tokens", "9")
	img := heatmapImage(t, d, 4, 896)
	if a, b := cellColor(img, 4, 896, 0, 0), cellColor(img, 4, 896, 3, 6); luminance(a) >= luminance(b) {
		t.Errorf("the least used cell %v is not darker than the most used %v", a, b)
	}

	bad := []struct {
		name string
		u    ExpertUsage
		want string
	}{
		{"empty", ExpertUsage{}, "0 layers"},
		{"ragged", ExpertUsage{Layers: []int32{0, 1}, Counts: [][]int{{1, 2}, {1}}}, "layer 1 has 1 experts"},
		{"all zero", ExpertUsage{Layers: []int32{0}, Counts: [][]int{{0, 0}}}, ""},
	}
	for _, tt := range bad {
		f, err := ExpertUsageHeatmap(tt.u, "")
		if tt.want == "" { // a constant grid still draws: its colour range is widened
			if err != nil {
				t.Errorf("%s: %v", tt.name, err)
			} else if _, err := f.SVG(); err != nil {
				t.Errorf("%s: %v", tt.name, err)
			}
			continue
		}
		if !errors.Is(err, ErrInput) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: want an ErrInput containing %q, got %v", tt.name, tt.want, err)
		}
	}
}

// The expert-usage colour scale starts at 0, not at the least count seen.
func TestExpertUsageScaleFromZero(t *testing.T) {
	u := ExpertUsage{Layers: []int32{1, 2}, Counts: [][]int{{5, 9}, {7, 6}}, Tokens: []int{7, 7}}
	fig, err := ExpertUsageHeatmap(u, "")
	if err != nil {
		t.Fatal(err)
	}
	bar := fig.scale
	if bar == nil {
		t.Fatal("no colour bar")
	}
	bar.Draw(draw.New(vgimg.New(100, 300))) // the bar's axis range is set when drawn
	if bar.Y.Min != 0 || bar.Y.Max != 9 {
		t.Errorf("colour scale %g..%g, want 0..9", bar.Y.Min, bar.Y.Max)
	}
}

func TestHeatmapAllMissing(t *testing.T) {
	_, err := newHeatmap(heatmapSpec{title: "t", z: [][]float64{{math.NaN(), math.Inf(1)}}})
	if !errors.Is(err, ErrInput) || !strings.Contains(err.Error(), "every cell is missing") {
		t.Errorf("got %v", err)
	}
}

func TestIndexTicks(t *testing.T) {
	tests := []struct {
		name  string
		ticks indexTicks
		n     int
		want  []string
	}{
		{"numbers", indexTicks{max: 10}, 4, []string{"0", "1", "2", "3"}},
		{"thinned to nice steps", indexTicks{max: 10}, 40, []string{"0", "5", "10", "15", "20", "25", "30", "35"}},
		{"names", indexTicks{names: []string{"a", "b"}, max: 10}, 2, []string{"a", "b"}},
		{"values", indexTicks{values: []float64{3, 7.5}, max: 10}, 2, []string{"3", "7.5"}},
	}
	for _, tt := range tests {
		var got []string
		for _, tk := range tt.ticks.Ticks(-0.5, float64(tt.n)-0.5) {
			got = append(got, tk.Label)
		}
		if strings.Join(got, ",") != strings.Join(tt.want, ",") {
			t.Errorf("%s: want %v, got %v", tt.name, tt.want, got)
		}
	}
}

// The viridis control colours must rise in luminance, or viridis() would fall back to another map.
func TestViridis(t *testing.T) {
	cm := viridis()
	cm.SetMin(0)
	cm.SetMax(1)
	lo, _ := cm.At(0)
	hi, _ := cm.At(1)
	if r, g, b, _ := lo.RGBA(); r>>8 != 0x44 || g>>8 != 0x01 || b>>8 != 0x54 {
		t.Errorf("viridis(0) = %v, want #440154", lo)
	}
	if r, g, b, _ := hi.RGBA(); r>>8 != 0xfd || g>>8 != 0xe7 || b>>8 != 0x25 {
		t.Errorf("viridis(1) = %v, want #fde725", hi)
	}
}

// TestHeatmapRasterStretches: the embedded raster of a heatmap fills its axes in a browser
// (preserveAspectRatio="none") and is labelled as the PNG it is.
func TestHeatmapRasterStretches(t *testing.T) {
	svg := fixRasters([]byte(`<svg><image x="1" href="data:image/jpg;base64,iVBORw0KG"/></svg>`))
	want := `<svg><image preserveAspectRatio="none" x="1" href="data:image/png;base64,iVBORw0KG"/></svg>`
	if string(svg) != want {
		t.Errorf("fixRasters = %s, want %s", svg, want)
	}
}
