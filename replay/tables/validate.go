package tables

import (
	"errors"
	"fmt"

	"github.com/potato-k3/potato-k3/replay"
)

// ErrInvalid is wrapped by every error that reports results Build cannot turn into tables.
var ErrInvalid = errors.New("tables: invalid result")

// ValidationError names the place in the results where a length or value does not fit the tables:
// which result (index in the slice and SeqID), which capture (Layer; -1 for per-token fields) and which
// field. errors.Is(err, ErrInvalid) holds.
type ValidationError struct {
	Index int    // position of the result in the slice given to Build
	SeqID int32  // its SeqID
	Layer int    // the capture's layer; -1 for per-token fields and for checks across captures
	Field string // e.g. "Stats", "Lens[2].Stats[5].TopLogp", "Hidden[0].Values"
	Msg   string
}

// Error reads "tables: invalid result: sequence 7 (result 2), layer 17: Lens[0].Stats: 5 entries, want 6".
func (e *ValidationError) Error() string {
	where := fmt.Sprintf("sequence %d (result %d)", e.SeqID, e.Index)
	if e.Layer >= 0 {
		where += fmt.Sprintf(", layer %d", e.Layer)
	}
	return fmt.Sprintf("%v: %s: %s: %s", ErrInvalid, where, e.Field, e.Msg)
}

// Unwrap makes errors.Is(err, ErrInvalid) hold.
func (e *ValidationError) Unwrap() error { return ErrInvalid }

// Validate checks that results can be written as tables: every per-position slice has one entry per token
// (Pieces, Messages and Channels may also be empty), top-k ids and log probabilities pair up, every
// capture's flat Values/IDs/Weights hold positions x width numbers, layers fit int32 and appear once per
// capture kind, SeqIDs are distinct, and all hidden vectors share one dim. It returns the first problem.
func Validate(results []replay.Result) error {
	seen := make(map[int32]int, len(results))
	hiddenDim, hiddenFrom := 0, -1
	for i := range results {
		r := &results[i]
		if j, dup := seen[r.SeqID]; dup {
			return &ValidationError{Index: i, SeqID: r.SeqID, Layer: -1, Field: "SeqID",
				Msg: fmt.Sprintf("also used by result %d", j)}
		}
		seen[r.SeqID] = i
		if err := validateResult(i, r); err != nil {
			return err
		}
		for j, h := range r.Hidden {
			if hiddenFrom < 0 {
				hiddenDim, hiddenFrom = h.Dim, i
			} else if h.Dim != hiddenDim {
				return &ValidationError{Index: i, SeqID: r.SeqID, Layer: h.Layer,
					Field: fmt.Sprintf("Hidden[%d].Dim", j),
					Msg:   fmt.Sprintf("%d, but result %d has dim %d (one table holds one vector width)", h.Dim, hiddenFrom, hiddenDim)}
			}
		}
	}
	return nil
}

// validateResult checks one result; i is its index, for the error.
func validateResult(i int, r *replay.Result) error {
	bad := func(layer int, field, format string, args ...any) error {
		return &ValidationError{Index: i, SeqID: r.SeqID, Layer: layer, Field: field, Msg: fmt.Sprintf(format, args...)}
	}
	n := len(r.Tokens)
	if n > maxInt32 {
		return bad(-1, "Tokens", "%d tokens do not fit an int32 position", n)
	}
	for _, f := range []struct {
		name     string
		length   int
		optional bool // empty means "not available" and is written as "" or -1
	}{
		{"Pieces", len(r.Pieces), true},
		{"Messages", len(r.Messages), true},
		{"Channels", len(r.Channels), true},
		{"Targets", len(r.Targets), false},
		{"Stats", len(r.Stats), false},
	} {
		if f.length != n && !(f.optional && f.length == 0) {
			return bad(-1, f.name, "%d entries, want %d (one per token)", f.length, n)
		}
	}
	for t, id := range r.Targets {
		if id < -1 {
			return bad(-1, fmt.Sprintf("Targets[%d]", t), "%d (want a token id or -1 for none)", id)
		}
	}
	for t := range r.Stats {
		if err := checkTopK(r.Stats[t].TopIDs, r.Stats[t].TopLogp); err != "" {
			return bad(-1, fmt.Sprintf("Stats[%d]", t), "%s", err)
		}
	}
	layers := map[string]bool{}
	once := func(kind string, layer int, extra string) string {
		key := fmt.Sprint(kind, layer, extra)
		if layers[key] {
			return "appears twice"
		}
		layers[key] = true
		if layer < 0 || layer > maxInt32 {
			return "layer out of range"
		}
		return ""
	}
	for j, l := range r.Lens {
		field := fmt.Sprintf("Lens[%d]", j)
		if msg := once("lens", l.Layer, ""); msg != "" {
			return bad(l.Layer, field+".Layer", "%s", msg)
		}
		if len(l.Stats) != n {
			return bad(l.Layer, field+".Stats", "%d entries, want %d (one per token)", len(l.Stats), n)
		}
		for t := range l.Stats {
			if err := checkTopK(l.Stats[t].TopIDs, l.Stats[t].TopLogp); err != "" {
				return bad(l.Layer, fmt.Sprintf("%s.Stats[%d]", field, t), "%s", err)
			}
		}
	}
	for j, h := range r.Hidden {
		field := fmt.Sprintf("Hidden[%d]", j)
		if msg := once("hidden", h.Layer, ""); msg != "" {
			return bad(h.Layer, field+".Layer", "%s", msg)
		}
		if h.Dim <= 0 || h.Dim > maxInt32 {
			return bad(h.Layer, field+".Dim", "%d (want a positive vector width)", h.Dim)
		}
		if len(h.Values) != n*h.Dim {
			return bad(h.Layer, field+".Values", "%d values, want %d positions x dim %d = %d", len(h.Values), n, h.Dim, n*h.Dim)
		}
	}
	for j, rt := range r.Router {
		field := fmt.Sprintf("Router[%d]", j)
		if msg := once("router", rt.Layer, ""); msg != "" {
			return bad(rt.Layer, field+".Layer", "%s", msg)
		}
		if rt.K < 0 {
			return bad(rt.Layer, field+".K", "%d (want >= 0)", rt.K)
		}
		if len(rt.IDs) != n*rt.K || len(rt.Weights) != n*rt.K {
			return bad(rt.Layer, field+".IDs/Weights", "%d ids and %d weights, want %d positions x K %d = %d each",
				len(rt.IDs), len(rt.Weights), n, rt.K, n*rt.K)
		}
	}
	for j, m := range r.Mixes {
		field := fmt.Sprintf("Mixes[%d]", j)
		if m.Site == "" {
			return bad(m.Layer, field+".Site", "empty (want attn, mlp or output)")
		}
		if msg := once("mix", m.Layer, m.Site); msg != "" {
			return bad(m.Layer, field+".Layer", "site %q %s", m.Site, msg)
		}
		if m.N < 0 {
			return bad(m.Layer, field+".N", "%d (want >= 0)", m.N)
		}
		if len(m.Weights) != n*m.N {
			return bad(m.Layer, field+".Weights", "%d weights, want %d positions x N %d = %d", len(m.Weights), n, m.N, n*m.N)
		}
	}
	return nil
}

// checkTopK returns why a top-k pair cannot become two aligned list cells, or "" when it can.
func checkTopK(ids []int32, logp []float32) string {
	if len(ids) != len(logp) {
		return fmt.Sprintf("TopIDs has %d entries but TopLogp %d", len(ids), len(logp))
	}
	// The column is documented as sorted; an unsorted list is a backend bug best caught before it reaches
	// a plot that takes the first entry as the argmax.
	for k := 1; k < len(logp); k++ {
		if logp[k] > logp[k-1] {
			return fmt.Sprintf("TopLogp[%d] = %g > TopLogp[%d] = %g (want descending probability)", k, logp[k], k-1, logp[k-1])
		}
	}
	return ""
}
