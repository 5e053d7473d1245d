package kernel_test

import (
	"context"
	"fmt"

	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/potato-k3/potato-k3/kernel"
	"github.com/potato-k3/potato-k3/replay/tokenizer"
)

// A notebook cell: reach the engine (here the background one, started on the embedded tiny model on
// first use), replay a conversation and some token ids with the top 3 alternatives and a logit-lens
// readout of layer 0, and look at the tables. In a GoNB cell res.Display() shows the tokens table.
func Example() {
	c, err := kernel.Connect()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()
	conv := tokenizer.Conversation{Thinking: tokenizer.ThinkingOff, Messages: []tokenizer.Message{
		{Role: tokenizer.RoleUser, Content: "What is 2 + 2?"},
		{Role: tokenizer.RoleAssistant, Content: "4"},
	}}
	res, err := c.Replay(context.Background(), kernel.Chat(conv), kernel.Tokens(1, 2, 3, 4),
		kernel.TopK(3), kernel.Lens(0))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer res.Release()

	tokens := res.Tokens()
	seq := tokens.Column(0).(*array.Int32)
	rows := map[int32]int{}
	for i := range seq.Len() {
		rows[seq.Value(i)]++
	}
	fmt.Println("columns:", tokens.Schema().Field(3).Name, tokens.Schema().Field(5).Name, tokens.Schema().Field(7).Name)
	fmt.Println("token ids replayed:", rows[1])
	fmt.Println("lens rows equal token rows:", res.Lens().NumRows() == tokens.NumRows())
	fmt.Println("no hidden table:", res.Hidden() == nil)
	// Output:
	// columns: token channel logprob
	// token ids replayed: 4
	// lens rows equal token rows: true
	// no hidden table: true
}
