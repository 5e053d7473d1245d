package tables_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/potato-k3/potato-k3/replay"
	"github.com/potato-k3/potato-k3/replay/ops"
	"github.com/potato-k3/potato-k3/replay/tables"
)

// A two-token result, as the engine returns it.
func exampleResults() []replay.Result {
	return []replay.Result{{
		SeqID:    0,
		Tokens:   []int32{9906, 1917},
		Pieces:   []string{"Hello", " world"},
		Messages: []int32{0, 0},
		Channels: []string{"user", "user"},
		Targets:  []int32{1917, -1},
		Stats: []ops.TokenStats{
			{Logprob: -2.5, Rank: 3, Entropy: 4.25, TopIDs: []int32{11, 13}, TopLogp: []float32{-0.75, -1.5}},
			{Entropy: 1.5, TopIDs: []int32{0}, TopLogp: []float32{-0.25}},
		},
	}}
}

// examplePieces stands in for a tokenizer: a server passes its tokenizer's Piece.
var examplePieces = map[int32]string{0: "!", 11: ",", 13: "."}

// Example builds the tables of a replay, sends the tokens table as an Arrow IPC stream (what the server
// writes to a notebook cell), reads it back and turns it into results again.
func Example() {
	set, err := tables.Build(exampleResults(), tables.Options{
		Metadata: map[string]string{tables.MetaPrecision: "bf16", tables.MetaBackend: "cpu"},
		Piece:    func(id int32) string { return examplePieces[id] }, // names the top-k ids: topk_tokens
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer set.Release()

	var stream bytes.Buffer // an HTTP response body with Content-Type tables.ContentType
	if err := tables.WriteIPC(&stream, set.Tokens.Records...); err != nil {
		fmt.Println(err)
		return
	}
	tokens, err := tables.ReadIPC(&stream, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer tokens.Release()
	fmt.Println(tokens.Name, tokens.NumRows(), "rows")
	rec := tokens.Records[0]
	for i, f := range rec.Schema().Fields() {
		if f.Name == "token" || f.Name == "logprob" || f.Name == "topk_ids" || f.Name == "topk_tokens" {
			fmt.Printf("%s: %s, %s\n", f.Name, rec.Column(i).ValueStr(0), rec.Column(i).ValueStr(1))
		}
	}

	results, err := tables.FromRecords(tokens.Records...)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("logprob of", results[0].Pieces[1], "after", results[0].Pieces[0]+":", results[0].Stats[0].Logprob)
	// Output:
	// tokens 2 rows
	// token: Hello,  world
	// logprob: -2.5, (null)
	// topk_ids: [11,13], [0]
	// topk_tokens: [",","."], ["!"]
	// logprob of  world after Hello: -2.5
}

// ExampleWriteSet writes every table of a Set as Parquet, one file per table, and reads the set back.
func ExampleWriteSet() {
	dir, err := os.MkdirTemp("", "tables-example")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	res := exampleResults()
	res[0].Lens = []replay.LayerStats{{Layer: 92, Stats: res[0].Stats}}
	set, err := tables.Build(res, tables.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer set.Release()

	written, err := tables.WriteSet(context.Background(), filepath.Join(dir, "results.parquet"), set)
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, p := range written {
		fmt.Println(filepath.Base(p))
	}
	back, err := tables.ReadSet(filepath.Join(dir, "results.parquet"), nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer back.Release()
	fmt.Println("lens rows:", back.Lens.NumRows(), "schema version:", back.Lens.Schema.Metadata().ToMap()[tables.MetaSchemaVersion])
	// Output:
	// results.tokens.parquet
	// results.lens.parquet
	// lens rows: 2 schema version: 3
}
