package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/potato-k3/potato-k3/replay"
)

// printSummary writes a readable per-token table of each sequence: the token, the log-probability the
// model gave it at the position before, its rank, the entropy there, and the top alternatives.
func printSummary(w io.Writer, l *loaded, res []replay.Result, st replay.WaveStats, show int) {
	fmt.Fprintf(w, "%s: %d sequences, %d tokens, %s on %s, %.1f MB of weights read in %.2fs\n",
		l.dir, st.Sequences, st.Tokens, l.precision, l.backend, float64(st.BytesRead())/1e6, st.Seconds)
	for _, r := range res {
		var sum float64
		n := 0
		for t := range r.Tokens {
			if r.Targets[t] >= 0 {
				sum += float64(r.Stats[t].Logprob)
				n++
			}
		}
		fmt.Fprintf(w, "\nsequence %d: %d tokens", r.SeqID, len(r.Tokens))
		if n > 0 {
			fmt.Fprintf(w, ", mean logprob %.3f nats", sum/float64(n))
		}
		fmt.Fprintln(w)
		if show <= 0 {
			continue
		}
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "pos\ttoken\tchannel\tlogprob\trank\tentropy\ttop alternatives (next token)")
		for t := 0; t < len(r.Tokens) && t < show; t++ {
			s := r.Stats[t]
			// the token at t is scored at t-1: show its logprob and rank beside it
			lp, rank := "", ""
			if t > 0 {
				lp, rank = fmt.Sprintf("%.3f", r.Stats[t-1].Logprob), fmt.Sprint(r.Stats[t-1].Rank)
			}
			var alts []string
			for i, id := range s.TopIDs {
				alts = append(alts, fmt.Sprintf("%s %.2f", quote(piece(l, r, id)), s.TopLogp[i]))
			}
			ch := ""
			if len(r.Channels) > t {
				ch = r.Channels[t]
			}
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%.3f\t%s\n", t, quote(tokenPiece(l, r, t)), ch, lp, rank, s.Entropy, strings.Join(alts, ", "))
		}
		tw.Flush()
		if len(r.Tokens) > show {
			fmt.Fprintf(w, "... %d more positions (--show N, or --out FILE for all)\n", len(r.Tokens)-show)
		}
	}
}

func tokenPiece(l *loaded, r replay.Result, t int) string {
	if len(r.Pieces) > t {
		return r.Pieces[t]
	}
	return piece(l, r, r.Tokens[t])
}

func piece(l *loaded, _ replay.Result, id int32) string {
	if l.tok == nil {
		return fmt.Sprintf("#%d", id)
	}
	return l.tok.Piece(id)
}

// quote shows a display piece in quotes, cut at 24 characters (tokenizer.Piece already escapes control
// bytes, newlines and partial UTF-8).
func quote(s string) string {
	r := []rune(s)
	if len(r) > 24 {
		s = string(r[:24]) + "…"
	}
	return `"` + s + `"`
}
