package plotting

import (
	"errors"
	"math"
	"strings"
	"testing"
)

func TestTopK(t *testing.T) {
	tests := []struct {
		name        string
		alts        []Alternative
		wantBars    int
		wantTargets int
		wantTexts   []string
	}{
		{"no target", []Alternative{{Label: `" the"`, Logprob: math.Log(0.5)}, {Label: `"<a>"`, Logprob: math.Log(0.25)}},
			2, 0, []string{"Top next-token predictions", "probability", `" the"`, `"<a>"`, "50.0%", "25.0%"}},
		{"target among", []Alternative{{Label: "x", Logprob: -0.1}, {Label: "y", Logprob: -2, Target: true}, {Label: "z", Logprob: -3}},
			3, 1, []string{"x", "y", "z", "probability (orange: the token that came next)"}},
		{"one", []Alternative{{Label: "only", Logprob: 0}}, 1, 0, []string{"100.0%"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := svgOf(t)(TopK(tt.alts, ""))
			checkTexts(t, d, tt.wantTexts...)
			targets := d.fills(targetColor) / 2 // its bar and its marker; no legend swatch: the axis label explains the colour
			if got := d.fills(barColor) + targets; got != tt.wantBars || targets != tt.wantTargets {
				t.Errorf("bars: want %d (%d target), got %d (%d target)", tt.wantBars, tt.wantTargets, got, targets)
			}
		})
	}
}

func TestTopKAt(t *testing.T) {
	rows := tokenSeq(0, []string{"a", "b", "c"}, []float64{-0.5, -4})
	rows[1].TopKIDs, rows[1].TopKLogprobs = []int32{7, 8}, []float64{-0.2, -2} // the target 102 is not in the top 2
	rows[1].Rank = 9
	decode := func(id int32) string { return map[int32]string{7: " seven", 8: "\n", 101: "b", 102: "c"}[id] }

	d := svgOf(t)(TopKAt(rows, 0, 0, decode))
	checkTexts(t, d, `Next token after "a" (seq 0, pos 0)`, `"b"`, `" seven"`)
	if got := d.fills(targetColor); got != 2 {
		t.Errorf("pos 0: want the target bar and its marker orange, got %d", got)
	}

	d = svgOf(t)(TopKAt(rows, 0, 1, decode))
	checkTexts(t, d, `" seven"`, `"\n"`, `"c" (rank 9)`)
	if bars, targets := d.fills(barColor), d.fills(targetColor); bars != 2 || targets != 2 {
		t.Errorf("pos 1: want 2 bars and the target added, got %d and %d", bars, targets)
	}

	d = svgOf(t)(TopKAt(rows, 0, 0, nil))
	checkTexts(t, d, "#101")

	// Without a decoder, the table's own pieces (topk_tokens, already escaped as the token column is) name
	// the alternatives, and the next row's token the target added at the bottom.
	rows[1].TopKTokens = []string{` seven`, `\n`}
	d = svgOf(t)(TopKAt(rows, 0, 1, nil))
	checkTexts(t, d, `" seven"`, `"\n"`, `"c" (rank 9)`)
}

// The token that came next, outside the top k with a tiny probability, is labelled with its digits (not
// 0.0%) and marked where its bar ends, so that it shows although the bar is a fraction of a pixel.
func TestTopKAtUnlikelyTarget(t *testing.T) {
	rows := tokenSeq(0, []string{"a", "b"}, []float64{-8})
	rows[0].TopKIDs, rows[0].TopKLogprobs, rows[0].Rank = []int32{7, 8}, []float64{-0.2, -2}, 1234
	d := svgOf(t)(TopKAt(rows, 0, 0, nil))
	checkTexts(t, d, "0.034%", `"b" (rank 1234)`)
	for _, s := range d.texts {
		if s == "0.0%" {
			t.Error("a probability labelled 0.0%")
		}
	}
	if got := d.fills(targetColor); got < 2 {
		t.Errorf("want the target's bar and its marker orange, got %d orange fills", got)
	}
}

func TestPercent(t *testing.T) {
	for p, want := range map[float64]string{0.413: "41.3%", 0.025: "2.5%", 3.35e-4: "0.034%", 4.2e-8: "4.2e-06%", 0: "0%"} {
		if got := percent(p); got != want {
			t.Errorf("percent(%g) = %q, want %q", p, got, want)
		}
	}
}

func TestQuotePiece(t *testing.T) {
	// A piece escapes as strconv.Quote does, but for the double quote: quotePiece adds that.
	for piece, want := range map[string]string{" the": `" the"`, `\n`: `"\n"`, `say "hi"`: `"say \"hi\""`,
		`<0xE4>`: `"<0xE4>"`, "": `""`, `a\\b`: `"a\\b"`,
		"raw\n\ttext": `"raw\n\ttext"`} { // a hand-built row's raw newline stays on the label's one line
		if got := quotePiece(piece); got != want {
			t.Errorf("quotePiece(%q): -want %s +got %s", piece, want, got)
		}
	}
}

func TestTopKErrors(t *testing.T) {
	rows := tokenSeq(0, []string{"a", "b"}, []float64{-1})
	noTop := tokenSeq(0, []string{"a", "b"}, []float64{-1})
	noTop[0].TopKIDs, noTop[0].TopKLogprobs = nil, nil
	bad := tokenSeq(0, []string{"a", "b"}, []float64{-1})
	bad[0].TopKLogprobs = bad[0].TopKLogprobs[:1]
	tests := []struct {
		name string
		fn   func() (*Figure, error)
		want string
	}{
		{"empty", func() (*Figure, error) { return TopK(nil, "") }, "no alternatives"},
		{"positive", func() (*Figure, error) { return TopK([]Alternative{{Label: "x", Logprob: 0.3}}, "") }, "logprob 0.3, want <= 0"},
		{"NaN", func() (*Figure, error) { return TopK([]Alternative{{Label: "x", Logprob: math.NaN()}}, "") }, "logprob NaN"},
		{"missing row", func() (*Figure, error) { return TopKAt(rows, 0, 5, nil) }, "no tokens row for seq 0 pos 5: its positions are 0..1"},
		{"missing seq", func() (*Figure, error) { return TopKAt(rows, 3, 0, nil) }, "the tokens rows hold no seq 3"},
		{"no top-k", func() (*Figure, error) { return TopKAt(noTop, 0, 0, nil) }, "has no top-k"},
		{"lengths", func() (*Figure, error) { return TopKAt(bad, 0, 0, nil) }, "2 topk_ids but 1 topk_logprobs"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := tt.fn()
			if !errors.Is(err, ErrInput) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("want an ErrInput containing %q, got %v", tt.want, err)
			}
		})
	}
}
