package datasets

import (
	"bytes"

	"github.com/potato-k3/potato-k3/datasets/examples"
	"github.com/potato-k3/potato-k3/replay/tokenizer"
)

// Examples returns the bundled example conversations, freshly parsed (the caller may change them). They
// are small enough to replay on the tiny CPU model in a notebook and cover every channel of the chat
// format. The package tests check that the file parses, so the result is never empty. They live in package
// datasets/examples, which a notebook cell imports (examples.Get(id), kernel.Example(id)) without
// linking Parquet; this is the same text read with the strict ReadJSONL.
func Examples() []tokenizer.Conversation {
	convs, err := ReadJSONL(bytes.NewReader(examples.JSONL()), "examples.jsonl")
	if err != nil {
		return nil // unreachable: TestExamples parses the same bytes
	}
	return convs
}

// ExamplesJSONL returns the bundled examples as the JSONL text they are stored in.
func ExamplesJSONL() []byte { return examples.JSONL() }
