package datasets

import (
	"bytes"
	_ "embed" // the bundled examples
	"slices"

	"github.com/potato-k3/potato-k3/replay/tokenizer"
)

// examplesJSONL holds short, benign conversations written for this project: everyday questions, a little
// Go, Python and SQL, a recipe, a Chinese-English mixed exchange, a tool call with its result, and two
// turns with reasoning content. Each line says its thinking mode, so they replay without SetThinking.
//
//go:embed examples.jsonl
var examplesJSONL []byte

// Examples returns the bundled example conversations, freshly parsed (the caller may change them). They
// are small enough to replay on the tiny CPU model in a notebook and cover every channel of the chat
// format. The package tests check that the file parses, so the result is never empty.
func Examples() []tokenizer.Conversation {
	convs, err := ReadJSONL(bytes.NewReader(examplesJSONL), "examples.jsonl")
	if err != nil {
		return nil // unreachable: TestExamples parses the same bytes
	}
	return convs
}

// ExamplesJSONL returns the bundled examples as the JSONL text they are stored in.
func ExamplesJSONL() []byte {
	return slices.Clone(examplesJSONL)
}
