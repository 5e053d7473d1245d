package tables

import (
	"errors"
	"strings"
	"testing"

	"github.com/potato-k3/potato-k3/replay"
)

// TestValidate breaks one thing at a time in otherwise valid results and checks that Build refuses them
// with a ValidationError naming the sequence, the layer and the field.
func TestValidate(t *testing.T) {
	tests := []struct {
		name      string
		break_    func(rs []replay.Result)
		seq       int32
		layer     int
		field     string
		msgSubstr string
	}{
		{"short Stats", func(rs []replay.Result) { rs[1].Stats = rs[1].Stats[:3] }, 5, -1, "Stats", "3 entries, want 4"},
		{"long Pieces", func(rs []replay.Result) { rs[0].Pieces = append(rs[0].Pieces, "x") }, 9, -1, "Pieces", "4 entries, want 3"},
		{"short Targets", func(rs []replay.Result) { rs[0].Targets = nil }, 9, -1, "Targets", "0 entries, want 3"},
		{"bad target", func(rs []replay.Result) { rs[1].Targets[2] = -7 }, 5, -1, "Targets[2]", "-7"},
		{"short Messages", func(rs []replay.Result) { rs[0].Messages = rs[0].Messages[:1] }, 9, -1, "Messages", "1 entries"},
		{"top-k lengths", func(rs []replay.Result) {
			rs[1].Stats[1].TopIDs, rs[1].Stats[1].TopLogp = []int32{1, 2}, []float32{-1}
		}, 5, -1, "Stats[1]", "TopIDs has 2 entries but TopLogp 1"},
		{"top-k unsorted", func(rs []replay.Result) {
			rs[1].Stats[0].TopIDs, rs[1].Stats[0].TopLogp = []int32{1, 2}, []float32{-2, -1}
		}, 5, -1, "Stats[0]", "want descending"},
		{"lens short", func(rs []replay.Result) { rs[1].Lens[1].Stats = rs[1].Lens[1].Stats[1:] }, 5, 1, "Lens[1].Stats", "3 entries, want 4"},
		{"lens top-k", func(rs []replay.Result) {
			rs[0].Lens[0].Stats[2].TopLogp = nil
			rs[0].Lens[0].Stats[2].TopIDs = []int32{4}
		}, 9, 3, "Lens[0].Stats[2]", "TopIDs has 1"},
		{"lens layer twice", func(rs []replay.Result) { rs[0].Lens[1].Layer = 3 }, 9, 3, "Lens[1].Layer", "appears twice"},
		{"lens negative layer", func(rs []replay.Result) { rs[0].Lens[1].Layer = -2 }, 9, -2, "Lens[1].Layer", "out of range"},
		{"hidden values", func(rs []replay.Result) { rs[1].Hidden[0].Values = rs[1].Hidden[0].Values[1:] }, 5, 3, "Hidden[0].Values", "want 4 positions x dim 2 = 8"},
		{"hidden dim", func(rs []replay.Result) { rs[1].Hidden[1].Dim = 0 }, 5, 1, "Hidden[1].Dim", "positive"},
		{"hidden dims differ", func(rs []replay.Result) {
			h := &rs[1].Hidden[1]
			h.Dim, h.Values = 4, make([]float32, 4*4)
		}, 5, 1, "Hidden[1].Dim", "result 0 has dim 2"},
		{"router ids", func(rs []replay.Result) { rs[0].Router[0].IDs = rs[0].Router[0].IDs[2:] }, 9, 4, "Router[0].IDs/Weights", "want 3 positions x K 2"},
		{"router K", func(rs []replay.Result) { rs[0].Router[1].K = -1 }, 9, 2, "Router[1].K", ">= 0"},
		{"mix weights", func(rs []replay.Result) { rs[1].Mixes[1].Weights = nil }, 5, 1, "Mixes[1].Weights", "want 4 positions x N 3"},
		{"mix site", func(rs []replay.Result) { rs[1].Mixes[0].Site = "" }, 5, 1, "Mixes[0].Site", "empty"},
		{"mix twice", func(rs []replay.Result) { rs[1].Mixes[1].Site = "attn" }, 5, 1, "Mixes[1].Layer", `site "attn" appears twice`},
		{"duplicate seq", func(rs []replay.Result) { rs[1].SeqID = 9 }, 9, -1, "SeqID", "also used by result 0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rs := makeResults(3, 2, spec{seq: 9, tokens: 3, conv: true}, spec{seq: 5, tokens: 4})
			if err := Validate(rs); err != nil {
				t.Fatalf("valid results refused: %v", err)
			}
			tt.break_(rs)
			set, err := Build(rs, Options{})
			if err == nil {
				set.Release()
				t.Fatal("Build accepted invalid results")
			}
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("errors.Is(%v, ErrInvalid) is false", err)
			}
			var ve *ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("error %v is not a *ValidationError", err)
			}
			if ve.SeqID != tt.seq || ve.Layer != tt.layer || ve.Field != tt.field || !strings.Contains(ve.Msg, tt.msgSubstr) {
				t.Errorf("error:\n-want sequence %d, layer %d, field %s, message containing %q\n+got  %v",
					tt.seq, tt.layer, tt.field, tt.msgSubstr, err)
			}
		})
	}
}

// TestValidationErrorText pins the message format researchers see.
func TestValidationErrorText(t *testing.T) {
	err := &ValidationError{Index: 2, SeqID: 7, Layer: 17, Field: "Lens[0].Stats", Msg: "5 entries, want 6 (one per token)"}
	want := "tables: invalid result: sequence 7 (result 2), layer 17: Lens[0].Stats: 5 entries, want 6 (one per token)"
	if err.Error() != want {
		t.Errorf("-want %q\n+got  %q", want, err.Error())
	}
}
