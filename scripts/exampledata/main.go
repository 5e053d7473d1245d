// Command exampledata writes a dataset of N conversations in the style of the bundled examples, for
// trying dataset jobs at scale: conversation i is bundled example i mod 15, its id suffixed with i and its
// first user message with " (variant i)", so that every conversation is distinct.
//
//	go run ./scripts/exampledata -n 1000 -out /tmp/examples1000.parquet   # or .jsonl
//
// A .parquet file has the columns id (string), thinking (bool) and conversation (the JSON text of the
// conversation), which datasets.ReadParquet reads.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"

	"github.com/potato-k3/potato-k3/datasets"
	"github.com/potato-k3/potato-k3/replay/tokenizer"
)

type line struct {
	ID       string              `json:"id"`
	Thinking bool                `json:"thinking"`
	Messages []tokenizer.Message `json:"messages"`
}

func main() {
	n := flag.Int("n", 1000, "conversations")
	out := flag.String("out", "", "FILE.jsonl or FILE.parquet")
	flag.Parse()
	if err := write(*out, *n); err != nil {
		fmt.Fprintln(os.Stderr, "exampledata:", err)
		os.Exit(1)
	}
}

func lines(n int) ([]line, error) {
	ex := datasets.Examples()
	if len(ex) == 0 {
		return nil, fmt.Errorf("no bundled examples")
	}
	out := make([]line, n)
	for i := range out {
		c := ex[i%len(ex)]
		msgs := append([]tokenizer.Message(nil), c.Messages...)
		for j := range msgs {
			if msgs[j].Role == tokenizer.RoleUser {
				msgs[j].Content += fmt.Sprintf(" (variant %d)", i)
				break
			}
		}
		out[i] = line{ID: fmt.Sprintf("%s-%04d", c.ID, i), Thinking: c.Thinking == tokenizer.ThinkingOn, Messages: msgs}
	}
	return out, nil
}

func write(path string, n int) (err error) {
	ext := strings.ToLower(filepath.Ext(path))
	if ext != ".jsonl" && ext != ".parquet" {
		return fmt.Errorf("%q: want FILE.jsonl or FILE.parquet (-out)", path)
	}
	ls, err := lines(n)
	if err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	// f is closed here and only here: a full disk can show first at Close, and the file is not written
	// unless it closed. A file left half written would read as a shorter dataset, or not at all.
	defer func() {
		if cerr := f.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("%s: %w", path, cerr)
		}
		if err != nil {
			os.Remove(path)
		}
	}()
	switch ext {
	case ".jsonl":
		w := bufio.NewWriter(f)
		enc := json.NewEncoder(w)
		enc.SetEscapeHTML(false)
		for _, l := range ls {
			if err := enc.Encode(l); err != nil {
				return err
			}
		}
		if err := w.Flush(); err != nil {
			return err
		}
	case ".parquet":
		schema := arrow.NewSchema([]arrow.Field{
			{Name: "id", Type: arrow.BinaryTypes.String},
			{Name: "thinking", Type: arrow.FixedWidthTypes.Boolean},
			{Name: "conversation", Type: arrow.BinaryTypes.String},
		}, nil)
		b := array.NewRecordBuilder(memory.DefaultAllocator, schema)
		defer b.Release()
		for _, l := range ls {
			text, err := json.Marshal(map[string]any{"messages": l.Messages})
			if err != nil {
				return err
			}
			b.Field(0).(*array.StringBuilder).Append(l.ID)
			b.Field(1).(*array.BooleanBuilder).Append(l.Thinking)
			b.Field(2).(*array.StringBuilder).Append(string(text))
		}
		rec := b.NewRecordBatch()
		defer rec.Release()
		// The Parquet writer's Close closes its sink when the sink is an io.Closer, and the deferred
		// f.Close above then failed with "file already closed" after a good write. Hiding Close keeps
		// f this function's to close (as datasets.writeParquet does).
		w, err := pqarrow.NewFileWriter(schema, struct{ io.Writer }{f}, nil, pqarrow.DefaultWriterProps())
		if err != nil {
			return err
		}
		if err := w.Write(rec); err != nil {
			w.Close()
			return err
		}
		if err := w.Close(); err != nil {
			return err
		}
	}
	return nil
}
