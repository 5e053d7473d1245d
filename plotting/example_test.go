package plotting_test

import (
	"bytes"
	"fmt"
	"math"
	"regexp"

	"github.com/potato-k3/potato-k3/plotting"
)

// Two positions of a 4-layer logit lens, drawn as two curves and rendered to SVG.
func ExampleEntropyByLayer() {
	var lens []plotting.LensRow
	for layer := int32(0); layer < 4; layer++ {
		lens = append(lens,
			plotting.LensRow{Pos: 1, Layer: layer, Entropy: 6 / float64(layer+1)},
			plotting.LensRow{Pos: 2, Layer: layer, Entropy: 3 - 0.5*float64(layer)})
	}
	fig, err := plotting.EntropyByLayer(lens, plotting.EntropyOptions{Positions: []int32{1, 2}, Labels: []string{"' the'", "' cat'"}})
	if err != nil {
		fmt.Println(err)
		return
	}
	svg, err := fig.SVG()
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(fig.Plot.Title.Text)
	fmt.Println(bytes.Contains(svg, []byte("&#39; cat&#39;")) || bytes.Contains(svg, []byte("' cat'")))
	// Output:
	// Logit-lens entropy by layer (seq 0)
	// true
}

// Three tokens: the second was predicted with logprob -2.5, the third with -0.1, so the second is shaded
// darker. The first has no prediction.
func ExampleLogprobStrip() {
	rows := []plotting.TokenRow{
		{Pos: 0, TokenID: 791, Token: "The", TargetID: 8415, Logprob: -2.5, Rank: 3},
		{Pos: 1, TokenID: 8415, Token: " cat", TargetID: 7731, Logprob: -0.1, Rank: 1},
		{Pos: 2, TokenID: 7731, Token: " sat", TargetID: -1, Logprob: math.NaN()},
	}
	html, err := plotting.LogprobStrip(rows, plotting.StripOptions{})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, m := range regexp.MustCompile(`data-pos="(\d+)" data-surprise="([0-9.]+)"`).FindAllStringSubmatch(html, -1) {
		fmt.Println("pos", m[1], "surprise", m[2])
	}
	// Output:
	// pos 1 surprise 2.5000
	// pos 2 surprise 0.1000
}
