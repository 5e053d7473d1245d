package plotting

import (
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/potato-k3/potato-k3/replay"
	"github.com/potato-k3/potato-k3/replay/ops"
	"github.com/potato-k3/potato-k3/replay/tables"
	"github.com/potato-k3/potato-k3/replay/tokenizer"
)

// The tests in this file read tables built the way the engine builds them: replay.Results whose pieces
// are the tokenizer's display form (tokenizer.DisplayBytes, what Tokenizer.Piece returns for a BPE
// token) turned into records by replay/tables, the code that writes every table the engine serves. Rows
// built by hand with raw text would pass where the engine's output does not (a newline is the two
// characters \n in the tables).

// engineText is one conversation's raw token texts: a newline, a backslash, a tab, a byte that is not
// valid UTF-8 (the first byte of é) and text after each.
var engineText = []string{"Hi", "\n", ` a\b`, "\tx", "\xc3", "end", "\n\n", "ok"}

// engineSet builds the tokens, lens and router tables of engineText as the engine would.
func engineSet(t *testing.T) *tables.Set {
	t.Helper()
	n := len(engineText)
	raw := map[int32]string{7: " seven"}
	res := replay.Result{SeqID: 3, Conversation: "greeting", Thinking: "off"}
	lens := replay.LayerStats{Layer: 2}
	router := replay.LayerRouting{Layer: 1, K: 2}
	for p, text := range engineText {
		id := int32(100 + p)
		raw[id] = text
		res.Tokens = append(res.Tokens, id)
		res.Pieces = append(res.Pieces, tokenizer.DisplayBytes(text)) // the engine's tok.Piece(id)
		res.Messages = append(res.Messages, int32(p/4))               // two messages of four tokens
		res.Channels = append(res.Channels, "response")
		target, st := int32(-1), ops.TokenStats{Entropy: 1.5} // the last position: no target
		if p+1 < n {
			target = id + 1
			st = ops.TokenStats{Logprob: -float32(p + 1), Rank: int32(p + 1), Entropy: 1.5,
				TopIDs: []int32{target, 7}, TopLogp: []float32{-float32(p + 1), -float32(p + 2)}}
		}
		res.Targets = append(res.Targets, target)
		res.Stats = append(res.Stats, st)
		lst := st
		lst.Logprob, lst.Rank = st.Logprob*2, st.Rank*10
		lens.Stats = append(lens.Stats, lst)
		router.IDs = append(router.IDs, int32(p%16), 15)
		router.Weights = append(router.Weights, 0.75, 0.25)
	}
	res.Lens = []replay.LayerStats{lens}
	res.Router = []replay.LayerRouting{router}
	set, err := tables.Build([]replay.Result{res}, tables.Options{
		Piece: func(id int32) string { return tokenizer.DisplayBytes(raw[id]) }, // the engine's tok.Piece
	})
	if err != nil {
		t.Fatal(err)
	}
	return set
}

// TestEngineRows reads every field of the rows from the engine's tables.
func TestEngineRows(t *testing.T) {
	set := engineSet(t)
	defer set.Release()
	toks, err := TokenRows(set.Tokens.Records...)
	if err != nil {
		t.Fatal(err)
	}
	if len(toks) != len(engineText) {
		t.Fatalf("%d token rows, want %d", len(toks), len(engineText))
	}
	want := TokenRow{SeqID: 3, Pos: 2, TokenID: 102, Token: ` a\\b`, Message: 0, Channel: "response",
		Conversation: "greeting", Thinking: "off", TargetID: 103, TargetToken: `\tx`, Logprob: -3, Rank: 3, Entropy: 1.5,
		TopKIDs: []int32{103, 7}, TopKLogprobs: []float64{-3, -4}, TopKTokens: []string{`\tx`, " seven"}}
	if !reflect.DeepEqual(toks[2], want) {
		t.Errorf("tokens row 2 (-want +got):\n-%+v\n+%+v", want, toks[2])
	}
	if toks[1].Token != `\n` || toks[4].Token != `<0xC3>` || toks[5].Message != 1 {
		t.Errorf("pieces %q and %q, want the display form \\n and <0xC3>; message of pos 5: %d, want 1",
			toks[1].Token, toks[4].Token, toks[5].Message)
	}
	last := toks[len(toks)-1]
	if last.TargetID != -1 || !math.IsNaN(last.Logprob) || last.Rank != -1 {
		t.Errorf("last position: %+v, want target -1, NaN logprob, rank -1", last)
	}

	lens, err := LensRows(set.Lens.Records...)
	if err != nil {
		t.Fatal(err)
	}
	if l := lens[2]; l.Layer != 2 || l.TargetLogprob != -6 || l.TargetRank != 30 || l.Entropy != 1.5 {
		t.Errorf("lens row 2: %+v, want layer 2, target logprob -6, rank 30, entropy 1.5", l)
	}
	if l := lens[len(lens)-1]; !math.IsNaN(l.TargetLogprob) || l.TargetRank != -1 {
		t.Errorf("lens at the last position: %+v, want NaN and -1", l)
	}

	router, err := RouterRows(set.Router.Records...)
	if err != nil {
		t.Fatal(err)
	}
	if r := router[5]; r.Layer != 1 || !reflect.DeepEqual(r.ExpertIDs, []int32{5, 15}) || !reflect.DeepEqual(r.ExpertWeights, []float64{0.75, 0.25}) {
		t.Errorf("router row 5: %+v", r)
	}
}

// TestEngineStrip draws the engine's pieces: a newline escape breaks the line and shows faintly, a
// doubled backslash shows as one, a tab and a stray byte show as faint marks.
func TestEngineStrip(t *testing.T) {
	set := engineSet(t)
	defer set.Release()
	rows, err := TokenRows(set.Tokens.Records...)
	if err != nil {
		t.Fatal(err)
	}
	opts := StripOptions{Seq: 3}

	t.Run("HTML", func(t *testing.T) {
		s, err := LogprobStrip(rows, opts)
		if err != nil {
			t.Fatal(err)
		}
		spans := parseStrip(t, s)
		faint := func(mark string) string { return `<span style="color:#aaa">` + mark + `</span>` }
		want := []string{"Hi", faint("↵") + "\n", ` a\b`, faint("→") + "\tx", faint("&lt;0xC3&gt;"), "end",
			faint("↵") + "\n" + faint("↵") + "\n", "ok"}
		for p, sp := range spans {
			if sp.Inner != want[p] {
				t.Errorf("pos %d (piece %q): -want %q +got %q", p, rows[p].Token, want[p], sp.Inner)
			}
		}
		// The tooltip names the token as the table does, quoted once: "\n", not "\\n".
		if !strings.Contains(spans[1].Title, `token "\n" (#101)`) || !strings.Contains(spans[2].Title, `token " a\\b" (#102)`) {
			t.Errorf("tooltips %q and %q", spans[1].Title, spans[2].Title)
		}
		if !strings.Contains(spans[1].Title, `top: "\n" -1.00`) {
			t.Errorf("pos 1's alternatives should name the newline as the table does: %q", spans[1].Title)
		}
	})

	t.Run("figure", func(t *testing.T) {
		seq, prevs, err := stripSeq("test", rows, opts)
		if err != nil {
			t.Fatal(err)
		}
		boxes, lines := layoutStrip(seq, prevs, 80)
		type box struct {
			line  int
			text  string
			faint bool
		}
		var got []box
		for _, b := range boxes {
			got = append(got, box{b.line, b.text, b.faint})
		}
		want := []box{{0, "Hi", false}, {0, `\n`, true}, {1, ` a\b`, false}, {1, `\t`, true}, {1, "x", false},
			{1, "<0xC3>", true}, {1, "end", false}, {1, `\n`, true}, {2, `\n`, true}, {3, "ok", false}}
		if !reflect.DeepEqual(got, want) || lines != 4 {
			t.Errorf("boxes (-want +got):\n-%v\n+%v\nlines %d, want 4", want, got, lines)
		}
		fig, err := LogprobStripFigure(rows, opts)
		if err != nil {
			t.Fatal(err)
		}
		svg, err := fig.SVG()
		if err != nil {
			t.Fatal(err)
		}
		for _, text := range parseSVG(t, svg).texts {
			if strings.Contains(text, `\\`) {
				t.Errorf("the figure draws a doubled backslash: %q", text)
			}
		}
	})
}

// TestColumn reads the engine's tokens table column by column, as a notebook cell does.
func TestColumn(t *testing.T) {
	set := engineSet(t)
	defer set.Release()
	rec := set.Tokens.Records[0]
	pos, err := Column[*array.Int32](rec, "pos")
	if err != nil || pos.Len() != len(engineText) || pos.Value(2) != 2 {
		t.Fatalf("Column pos: %v, %v", pos, err)
	}
	if ch, err := Column[*array.String](rec, "channel"); err != nil || ch.Value(0) != "response" {
		t.Errorf("Column channel: %v, %v", ch, err)
	}
	for _, tt := range []struct {
		read func() error
		is   error
		want string
	}{
		{func() error { _, err := Column[*array.Float32](rec, "pos"); return err }, ErrColumn,
			`tokens table: column "pos": is int32 (*array.Int32), want *array.Float32`},
		{func() error { _, err := Column[*array.Int32](rec, "layer"); return err }, ErrColumn,
			`tokens table: column "layer": missing (have seq_id, pos, token_id`},
		{func() error { _, err := Column[*array.Int32](nil, "pos"); return err }, ErrInput, `column "pos" of no table (nil)`},
	} {
		if err := tt.read(); !errors.Is(err, tt.is) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("got %v, want %v containing %q", err, tt.is, tt.want)
		}
	}
}
