package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/potato-k3/potato-k3/internal/numtext"
	"github.com/potato-k3/potato-k3/replay"
	"github.com/potato-k3/potato-k3/replay/tokenizer"
)

// printSummary writes a readable per-token table of each sequence, row for row the Arrow tokens table: at
// position t the token there, the next token (target_id, the token at t+1), the log-probability and rank
// the model gave that next token at t, the entropy at t and the top alternatives for the next token. The
// last position has no next token: its logprob and rank are blank, as they are null in the table. out is
// the --out the tables go to ("" for none), for the line that says where the rows not shown are.
func printSummary(w io.Writer, l *loaded, res []replay.Result, st replay.WaveStats, show int, out string) {
	fmt.Fprintf(w, "%s: %s, %s, %s on %s, %.1f MB of weights read in %.2fs\n",
		l.dir, numtext.Count(st.Sequences, "sequence"), numtext.Count(st.Tokens, "token"), l.precision, l.backend, float64(st.BytesRead())/1e6, st.Seconds)
	for _, r := range res {
		// The mean over every scored token, and for a conversation over the tokens of its messages' text
		// alone: the chat markup (channel structure) is all but certain and would pull the mean towards 0.
		var sum, textSum float64
		n, textN := 0, 0
		for t := range r.Tokens {
			if r.Targets[t] >= 0 {
				lp := float64(r.Stats[t].Logprob)
				sum += lp
				n++
				if t+1 < len(r.Channels) && r.Channels[t+1] != string(tokenizer.ChannelStructure) {
					textSum += lp
					textN++
				}
			}
		}
		fmt.Fprintf(w, "\nsequence %d", r.SeqID)
		if r.Conversation != "" {
			fmt.Fprintf(w, " (conversation %s)", r.Conversation)
		}
		fmt.Fprintf(w, ": %s", numtext.Count(len(r.Tokens), "token"))
		if n > 0 {
			fmt.Fprintf(w, ", mean logprob %.3f nats", sum/float64(n))
		}
		if r.Conversation != "" && textN > 0 && textN < n {
			fmt.Fprintf(w, " (%.3f over the %s of the messages, the chat markup left out)", textSum/float64(textN), numtext.Count(textN, "token"))
		}
		fmt.Fprintln(w)
		if show <= 0 {
			continue
		}
		// Without a top-k (--top-k 0, replay's default) the last column would be empty on every row.
		topk := len(r.Stats) > 0 && len(r.Stats[0].TopIDs) > 0
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		if topk {
			fmt.Fprintln(tw, summaryHeader+"\t"+topkHeader)
		} else {
			fmt.Fprintln(tw, summaryHeader)
		}
		for t := 0; t < len(r.Tokens) && t < show; t++ {
			s := r.Stats[t]
			// row t is Arrow row t: the logprob and rank of the next token (target_id), scored at t
			next, lp, rank := "", "", ""
			if r.Targets[t] >= 0 {
				next = quote(piece(l, r, r.Targets[t]))
				if t+1 < len(r.Pieces) {
					next = quote(tokenPiece(l, r, t+1))
				}
				lp, rank = fmt.Sprintf("%.3f", s.Logprob), fmt.Sprint(s.Rank)
			}
			var alts []string
			for i, id := range s.TopIDs {
				alts = append(alts, fmt.Sprintf("%s %.2f", quote(piece(l, r, id)), s.TopLogp[i]))
			}
			ch := ""
			if len(r.Channels) > t {
				ch = r.Channels[t]
			}
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%.3f", t, quote(tokenPiece(l, r, t)), ch, next, lp, rank, s.Entropy)
			if topk {
				fmt.Fprintf(tw, "\t%s", strings.Join(alts, ", "))
			}
			fmt.Fprintln(tw)
		}
		tw.Flush()
		if !topk {
			fmt.Fprintln(w, "(--top-k N adds the N most probable next tokens to each row)")
		}
		if left := len(r.Tokens) - show; left > 0 {
			more := numtext.Commas(left) + " more positions"
			if left == 1 {
				more = "1 more position"
			}
			if out != "" {
				fmt.Fprintf(w, "... %s (all of them are in the tokens table of %s; --show N prints more)\n", more, out)
			} else {
				fmt.Fprintf(w, "... %s (potato replay --show N, or --out FILE for all)\n", more)
			}
		}
	}
}

// summaryHeader names the printed columns after the tokens table's, saying which token each number is
// about: next is target_id, and logprob(next) and rank(next) score it at pos.
const summaryHeader = "pos\ttoken\tchannel\tnext (target)\tlogprob(next)\trank(next)\tentropy"

// topkHeader is the last printed column's name, when the replay asked for a top-k.
const topkHeader = "top-k for next"

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

// quote shows a display piece in quotes, cut at 24 characters, a quote mark inside escaped as \" so that
// the piece " reads "\"" and not """ (tokenizer.Piece already escapes control bytes, newlines and partial
// UTF-8).
func quote(s string) string {
	r := []rune(s)
	if len(r) > 24 {
		s = string(r[:24]) + "…"
	}
	return `"` + strings.ReplaceAll(s, `"`, `\"`) + `"`
}
