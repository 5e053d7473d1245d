package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/potato-k3/potato-k3/datasets"
	"github.com/potato-k3/potato-k3/replay/tables"
)

// A conversation's summary line gives the mean logprob over every scored token and over the tokens of its
// messages alone (a target whose channel is not structure), each as the tokens table gives them.
func TestSummaryMeans(t *testing.T) {
	model := tinyModel(t)
	dir := t.TempDir()
	chats := filepath.Join(dir, "chats.jsonl")
	os.WriteFile(chats, datasets.ExamplesJSONL(), 0o644)
	out := filepath.Join(dir, "r.arrow")
	var stdout bytes.Buffer
	if err := run(context.Background(), []string{"replay", "--model", model, "--chat", chats, "--no-progress", "--show", "0",
		"--out", out}, &stdout); err != nil {
		t.Fatal(err)
	}
	tb, err := tables.ReadFile(tables.TablePath(out, tables.TokensTable), memory.DefaultAllocator)
	if err != nil {
		t.Fatal(err)
	}
	defer tb.Release()
	idx := func(name string) int { return tb.Schema.FieldIndices(name)[0] }
	var all, text float64
	n, m := 0, 0
	for _, rec := range tb.Records { // sequence 0 only, as the first summary line
		seq := rec.Column(idx("seq_id")).(*array.Int32)
		lp := rec.Column(idx("logprob")).(*array.Float32)
		ch := rec.Column(idx("channel")).(*array.String)
		for i := 0; i < int(rec.NumRows()); i++ {
			if seq.Value(i) != 0 || lp.IsNull(i) {
				continue
			}
			all += float64(lp.Value(i))
			n++
			if i+1 < int(rec.NumRows()) && ch.Value(i+1) != "structure" { // the target's channel
				text += float64(lp.Value(i))
				m++
			}
		}
	}
	want := fmt.Sprintf("mean logprob %.3f nats (%.3f over the %d tokens of the messages, the chat markup left out)", all/float64(n), text/float64(m), m)
	if !strings.Contains(stdout.String(), want) {
		t.Errorf("summary lacks %q:\n%s", want, stdout.String())
	}
}
