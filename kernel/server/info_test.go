package server

import (
	"encoding/json"
	"net/http"
	"os"
	"slices"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/potato-k3/potato-k3/kernel/api"
	"github.com/potato-k3/potato-k3/replay"
	"github.com/potato-k3/potato-k3/replay/tables"
	"github.com/potato-k3/potato-k3/replay/tokenizer"
)

// The wire package's list of tables is the tables package's.
func TestTableNamesAgree(t *testing.T) {
	if !slices.Equal(api.Tables, tables.TableNames) {
		t.Fatalf("api.Tables %v, tables.TableNames %v", api.Tables, tables.TableNames)
	}
}

func TestHealthInfoList(t *testing.T) {
	ts := startServer(t, Config{}, testHooks{})
	var h api.Health
	if code, body := ts.do(t, "GET", api.PathHealth, ""); code != http.StatusOK || json.Unmarshal(body, &h) != nil {
		t.Fatalf("health: %d %s", code, body)
	}
	if h.Status != "ok" || h.PID != os.Getpid() || h.Version != replay.Version {
		t.Errorf("health: %+v", h)
	}
	var info api.Info
	code, body := ts.do(t, "GET", api.PathInfo, "")
	if code != http.StatusOK || json.Unmarshal(body, &info) != nil {
		t.Fatalf("info: %d %s", code, body)
	}
	// MaxResultBytes defaults to half the memory available at start: not a constant
	defaults := DefaultLimits
	defaults.MaxResultBytes = info.Limits.MaxResultBytes
	if info.ModelDir != modelDir || info.Layers != 8 || info.Vocab != 3328 || info.Hidden != 128 ||
		info.Experts != 16 || info.ExpertsPerToken != 4 ||
		len(info.ConfigSHA256) != 64 || info.Backend != "cpu" || info.Precision != "bf16" || !info.Tokenizer ||
		info.Limits != defaults || info.Limits.MaxResultBytes <= 0 || info.EngineVersion != replay.Version {
		t.Errorf("info: %+v", info)
	}
	kinds := ""
	for _, k := range info.LayerKinds {
		kinds += k.Attn[:1] + k.FFN[:1] + " "
	}
	if kinds != "kd km km mm km km mm mm " {
		t.Errorf("layer kinds (attn, ffn initials): %s", kinds)
	}
	a := ts.submit(t, api.Request{Inputs: []api.Input{{Tokens: []int32{1}}}, Label: "first"}).ID
	b := ts.submit(t, api.Request{Inputs: []api.Input{{Tokens: []int32{2}}}, Label: "second"}).ID
	ts.waitState(t, b, api.StateDone)
	var list []api.JobStatus
	code, body = ts.do(t, "GET", api.PathJobs, "")
	if code != http.StatusOK || json.Unmarshal(body, &list) != nil || len(list) != 2 ||
		list[0].ID != a || list[1].ID != b || list[0].Label != "first" {
		t.Errorf("list: %d %s", code, body)
	}
}

// TestTopKTokens checks that the tables the server sends name every top-k id with the tokenizer's piece
// (topk_tokens), in the tokens and the lens tables, so that a notebook on another machine needs no
// tokenizer; and that the server's table of pieces is the tokenizer's Piece for every id and beyond.
func TestTopKTokens(t *testing.T) {
	tok, err := tokenizer.Load(modelDir)
	if err != nil {
		t.Fatal(err)
	}
	piece := pieceFunc(tok)
	for _, id := range []int32{-1, 0, 1, 255, int32(tok.NumBPE()), int32(tok.VocabSize() - 1), int32(tok.VocabSize())} {
		if got, want := piece(id), tok.Piece(id); got != want {
			t.Errorf("pieceFunc(%d): -want %q +got %q", id, want, got)
		}
	}
	if pieceFunc(nil) != nil {
		t.Error("pieceFunc(nil) should be nil: no tokenizer, empty topk_tokens")
	}

	ts := startServer(t, Config{}, testHooks{})
	id := ts.submit(t, api.Request{Inputs: []api.Input{api.TextInput("Hello, world\n")},
		Options: api.Options{TopK: 3, Lens: []int{2}}}).ID
	ts.waitState(t, id, api.StateDone)
	for _, name := range []string{tables.TokensTable, tables.LensTable} {
		tab := ts.table(t, id, name)
		named := 0
		for _, rec := range tab.Records {
			ids := rec.Column(rec.Schema().FieldIndices("topk_ids")[0]).(*array.List)
			pieces := rec.Column(rec.Schema().FieldIndices("topk_tokens")[0]).(*array.List)
			idv, pv := ids.ListValues().(*array.Int32), pieces.ListValues().(*array.String)
			for i := 0; i < int(rec.NumRows()); i++ {
				s, e := ids.ValueOffsets(i)
				ps, pe := pieces.ValueOffsets(i)
				if e-s != 3 || pe-ps != 3 {
					t.Fatalf("%s row %d: %d topk_ids and %d topk_tokens, want 3 each", name, i, e-s, pe-ps)
				}
				for k := range e - s {
					if got, want := pv.Value(int(ps+k)), tok.Piece(idv.Value(int(s+k))); got != want {
						t.Errorf("%s row %d top %d: -want %q +got %q", name, i, k, want, got)
					}
					named++
				}
			}
		}
		if named == 0 {
			t.Errorf("%s: no top-k entry", name)
		}
	}
}
