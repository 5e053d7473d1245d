package datasets_test

import (
	"fmt"
	"strings"

	"github.com/potato-k3/potato-k3/datasets"
	"github.com/potato-k3/potato-k3/replay/tokenizer"
)

// Two lines in two of the accepted shapes, then the thinking mode chosen for the one that did not say.
func ExampleReadJSONL() {
	const data = `{"id": "a", "thinking": true, "messages": [{"role": "user", "content": "2+2?"}, {"role": "assistant", "reasoning": "Add.", "content": "4"}]}
[{"role": "user", "content": [{"type": "text", "text": "Hello, "}, {"type": "text", "text": "world"}]}]
`
	convs, err := datasets.ReadJSONL(strings.NewReader(data), "demo.jsonl")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(datasets.SetThinking(convs, tokenizer.ThinkingOff), "set")
	for _, c := range convs {
		last := c.Messages[len(c.Messages)-1]
		fmt.Printf("%q thinking=%d last=%s %q reasoning=%q\n", c.ID, c.Thinking, last.Role, last.Content, last.Reasoning)
	}

	_, err = datasets.ReadJSONL(strings.NewReader(`[{"role": "narrator", "content": "Once"}]`), "bad.jsonl")
	fmt.Println(err)
	// Output:
	// 1 set
	// "a" thinking=1 last=assistant "4" reasoning="Add."
	// "line:2" thinking=2 last=user "Hello, world" reasoning=""
	// datasets: bad.jsonl line 1: messages[0].role: unknown role "narrator" (want system, user, assistant or tool)
}

// The bundled examples are ready to replay: each says its thinking mode.
func ExampleExamples() {
	convs := datasets.Examples()
	fmt.Println(len(convs), convs[0].ID, convs[0].Messages[0].Role)
	// Output:
	// 15 greeting user
}
