package plotting

import (
	"errors"
	"math"
	"strings"
	"testing"
)

// Inputs no engine writes but a notebook can pass: each is an error or a figure, never a panic, a hang or
// a page of ticks.
func TestOddInputs(t *testing.T) {
	t.Run("a table not asked for", func(t *testing.T) {
		for _, tt := range []struct {
			name string
			read func() error
			want string
		}{
			{"tokens", func() error { _, err := TokenRows(nil); return err }, "no tokens table (nil)"},
			{"lens", func() error { _, err := LensRows(nil); return err }, "no lens table (nil): the replay must ask for it (kernel.Lens or LensAll)"},
			{"router", func() error { _, err := RouterRows(nil); return err }, "(kernel.Router)"},
			{"attnres", func() error { _, err := AttnResRows(nil); return err }, "(kernel.AttnRes)"},
		} {
			if err := tt.read(); !errors.Is(err, ErrInput) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("%s rows of a nil record: %v, want ErrInput …%s…", tt.name, err, tt.want)
			}
		}
	})
	t.Run("layers two billion apart", func(t *testing.T) {
		ticks := LayerTicks{}.Ticks(0, 2e9)
		if len(ticks) == 0 || len(ticks) > 30 {
			t.Errorf("%d ticks for a span of 2e9 layers, want a few dozen at most", len(ticks))
		}
		for _, span := range [][2]float64{{0, math.Inf(1)}, {math.NaN(), 3}, {5, 1}, {-1e300, 1e300}} {
			if n := len(LayerTicks{}.Ticks(span[0], span[1])); n != 0 {
				t.Errorf("ticks over %v: %d, want none", span, n)
			}
		}
		rows := []LensRow{{Layer: 0, Entropy: 1}, {Layer: 2_000_000_000, Entropy: 2}}
		if _, err := EntropyByLayer(rows, EntropyOptions{}); err != nil && !errors.Is(err, ErrInput) {
			t.Errorf("EntropyByLayer over layers 0 and 2e9: %v", err)
		}
	})
	t.Run("entropies spanning more than a float64", func(t *testing.T) {
		rows := []LensRow{{Layer: 0, Pos: 0, Entropy: -1.7e308}, {Layer: 0, Pos: 1, Entropy: 1.7e308}}
		if _, err := EntropyHeatmap(rows, EntropyOptions{}); !errors.Is(err, ErrInput) || !strings.Contains(err.Error(), "more than a colour scale can show") {
			t.Errorf("EntropyHeatmap of ±1.7e308: %v, want ErrInput", err)
		}
	})
	t.Run("MaxSurprise not a number", func(t *testing.T) {
		rows := tokenSeq(0, []string{"a", "b", "c"}, []float64{-1, -2})
		for _, m := range []float64{math.NaN(), math.Inf(1), -3} {
			s, err := LogprobStrip(rows, StripOptions{MaxSurprise: m})
			if err != nil || strings.Contains(s, "NaN") || strings.Contains(s, "Inf") {
				t.Errorf("MaxSurprise %v: err %v, NaN or Inf in the HTML: %v", m, err, strings.Contains(s, "NaN") || strings.Contains(s, "Inf"))
			}
		}
	})
}
