package plotting

import (
	"encoding/xml"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// tokenSeq makes the tokens rows of one sequence whose pieces are texts; row p predicts token p+1 with
// logprob lps[p] (the last row has none). Token ids are 100+p; row p's top-k is its target and id 7.
func tokenSeq(seq int32, texts []string, lps []float64) []TokenRow {
	rows := make([]TokenRow, len(texts))
	for p, text := range texts {
		rows[p] = TokenRow{SeqID: seq, Pos: int32(p), TokenID: int32(100 + p), Token: text, TargetID: -1,
			Logprob: math.NaN(), Entropy: 1.5}
		if p+1 < len(texts) {
			rows[p].TargetID, rows[p].Logprob, rows[p].Rank = int32(101+p), lps[p], int32(p+1)
			rows[p].TopKIDs = []int32{int32(101 + p), 7}
			rows[p].TopKLogprobs = []float64{lps[p], lps[p] - 1}
		}
	}
	return rows
}

// stripSpan is one token span of a strip, read back with encoding/xml.
type stripSpan struct {
	Pos      int     `xml:"data-pos,attr"`
	Surprise *string `xml:"data-surprise,attr"`
	Title    string  `xml:"title,attr"`
	Style    string  `xml:"style,attr"`
	Inner    string  `xml:",innerxml"`
}

func parseStrip(t *testing.T, s string) []stripSpan {
	t.Helper()
	var doc struct {
		Divs []struct {
			Spans []stripSpan `xml:"span"`
		} `xml:"div"`
	}
	if err := xml.Unmarshal([]byte("<root>"+s+"</root>"), &doc); err != nil {
		t.Fatalf("strip is not well-formed: %v\n%s", err, s)
	}
	if len(doc.Divs) == 0 {
		t.Fatalf("no div in %s", s)
	}
	return doc.Divs[0].Spans
}

// alphaOf reads the opacity of a span's background.
func alphaOf(t *testing.T, style string) float64 {
	t.Helper()
	_, after, ok := strings.Cut(style, "rgba("+shadeRGB+",")
	if !ok {
		t.Fatalf("no shading in %q", style)
	}
	a, err := strconv.ParseFloat(after[:strings.IndexByte(after, ')')], 64)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func TestLogprobStrip(t *testing.T) {
	texts := []string{"<s>", "Hello", " <world>", " & ", "\n", `"quoted"`, " end"}
	lps := []float64{-3, -0.1, -12, -6, -0.01, -2}
	rows := tokenSeq(0, texts, lps)
	slices.Reverse(rows) // order of the rows does not matter
	rows = append(rows, tokenSeq(1, []string{"other"}, nil)...)
	decode := func(id int32) string { return fmt.Sprintf("<t%d>", id) }
	s, err := LogprobStrip(rows, StripOptions{Decode: decode})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(s, "<world>") || strings.Contains(s, "<t7>") {
		t.Errorf("unescaped token text in the strip")
	}
	spans := parseStrip(t, s)
	if len(spans) != len(texts) {
		t.Fatalf("want %d token spans, got %d", len(texts), len(spans))
	}
	type shade struct{ surprise, alpha float64 }
	var shades []shade
	for p, sp := range spans {
		if sp.Pos != p {
			t.Errorf("span %d has data-pos %d", p, sp.Pos)
		}
		// A raw newline (a row built by hand) is taken as the table's \n escape: a faint ↵, then the break.
		want := strings.ReplaceAll(escapeXML(texts[p]), "\n", `<span style="color:#aaa">↵</span>`+"\n")
		if sp.Inner != want {
			t.Errorf("pos %d text: want %q, got %q", p, want, sp.Inner)
		}
		if p == 0 {
			if sp.Surprise != nil || strings.Contains(sp.Style, "rgba") {
				t.Errorf("the first token has no prediction and must not be shaded: %+v", sp)
			}
			continue
		}
		if sp.Surprise == nil {
			t.Fatalf("pos %d: no data-surprise", p)
		}
		got, _ := strconv.ParseFloat(*sp.Surprise, 64)
		if math.Abs(got+lps[p-1]) > 1e-4 {
			t.Errorf("pos %d: surprise %v, want %v (from the row before)", p, got, -lps[p-1])
		}
		shades = append(shades, shade{got, alphaOf(t, sp.Style)})
		for _, w := range []string{fmt.Sprintf("logprob %.3f", lps[p-1]), fmt.Sprintf("rank %d", p), "<t7>", "entropy 1.500"} {
			if !strings.Contains(sp.Title, w) {
				t.Errorf("pos %d tooltip %q lacks %q", p, sp.Title, w)
			}
		}
	}
	// The more surprising, the darker; past MaxSurprise (10) the shading stays full.
	slices.SortFunc(shades, func(a, b shade) int { return int(math.Copysign(1, a.surprise-b.surprise)) })
	for i := 1; i < len(shades); i++ {
		a, b := shades[i-1], shades[i]
		if b.alpha < a.alpha || (b.surprise < defaultMaxSurprise && b.alpha <= a.alpha) {
			t.Errorf("surprise %v has alpha %v, surprise %v has alpha %v", a.surprise, a.alpha, b.surprise, b.alpha)
		}
	}
	if last := shades[len(shades)-1]; last.alpha != maxAlpha {
		t.Errorf("surprise %v over the cap: alpha %v, want %v", last.surprise, last.alpha, maxAlpha)
	}
}

// escapeXML is what encoding/xml's innerxml shows for text escaped by html.EscapeString.
func escapeXML(s string) string {
	r := strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&#34;", "'", "&#39;")
	return r.Replace(s)
}

// TestLogprobStripPieces checks the tooltips' alternatives without a decoder: named by the table's
// topk_tokens pieces where a row has them, by id where it has none.
func TestLogprobStripPieces(t *testing.T) {
	rows := tokenSeq(0, []string{"a", "b", "c"}, []float64{-1, -2})
	rows[0].TopKTokens = []string{"b", `\n`} // ids 101 and 7
	s, err := LogprobStrip(rows, StripOptions{})
	if err != nil {
		t.Fatal(err)
	}
	spans := parseStrip(t, s)
	for p, want := range map[int]string{1: `top: "b" -1.00, "\n" -2.00`, 2: "top: #102 -2.00, #7 -3.00"} {
		if !strings.Contains(spans[p].Title, want) {
			t.Errorf("pos %d tooltip %q lacks %q", p, spans[p].Title, want)
		}
	}
}

func TestLogprobStripErrors(t *testing.T) {
	good := tokenSeq(0, []string{"a", "b", "c"}, []float64{-1, -2})
	broken := tokenSeq(0, []string{"a", "b", "c"}, []float64{-1, -2})
	broken[0].TargetID = 55
	dup := append(tokenSeq(0, []string{"a", "b"}, []float64{-1}), TokenRow{Pos: 1})
	tests := []struct {
		name string
		rows []TokenRow
		opts StripOptions
		want string
	}{
		{"empty", nil, StripOptions{}, "no rows for seq 0"},
		{"other seq", good, StripOptions{Seq: 3}, "no rows for seq 3 (of 3 rows)"},
		{"target mismatch", broken, StripOptions{}, "pos 0: target_id 55 but the next token_id is 101"},
		{"duplicate", dup, StripOptions{}, "pos 1 appears twice"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := LogprobStrip(tt.rows, tt.opts)
			if !errors.Is(err, ErrInput) || !strings.Contains(err.Error(), tt.want) || s != "" {
				t.Errorf("want an ErrInput containing %q and no HTML, got %v", tt.want, err)
			}
		})
	}
	// A gap in the positions leaves the token after it unshaded instead of guessing.
	gap := tokenSeq(0, []string{"a", "b", "c", "d"}, []float64{-1, -2, -3})
	gap = append(gap[:1], gap[2:]...)
	s, err := LogprobStrip(gap, StripOptions{})
	if err != nil {
		t.Fatal(err)
	}
	spans := parseStrip(t, s)
	if spans[1].Pos != 2 || spans[1].Surprise != nil || spans[2].Surprise == nil {
		t.Errorf("after a gap: %+v", spans)
	}
}
