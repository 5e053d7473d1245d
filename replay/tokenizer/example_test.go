package tokenizer_test

import (
	"fmt"
	"log"
	"os"

	"github.com/potato-k3/potato-k3/replay/tokenizer"
)

// Write a synthetic model directory's tokenizer files, load them back, and encode text and a chat.
func Example() {
	dir, err := os.MkdirTemp("", "k3tok")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	if err := tokenizer.WriteModelFiles(dir, 32768); err != nil {
		log.Fatal(err)
	}
	tok, err := tokenizer.Load(dir)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(tok.NumBPE(), tok.VocabSize())

	for _, id := range tok.Encode("Hello, world!") {
		fmt.Printf("%d %q\n", id, tok.Piece(id))
	}

	chat, err := tok.EncodeConversation(tokenizer.Conversation{
		Thinking: tokenizer.ThinkingOff,
		Messages: []tokenizer.Message{{Role: tokenizer.RoleUser, Content: "Hi"}},
	})
	if err != nil {
		log.Fatal(err)
	}
	for _, t := range chat {
		fmt.Printf("%d %-10q message %d %s\n", t.ID, tok.Piece(t.ID), t.Message, t.Channel)
	}
	// Output:
	// 32768 33024
	// 3409 "Hello"
	// 44 ","
	// 5120 " world"
	// 33 "!"
	// 32771 "<|open|>" message 0 structure
	// 4359 "message"  message 0 structure
	// 1607 " ro"      message 0 structure
	// 285 "le"       message 0 structure
	// 1996 "=\""      message 0 structure
	// 3835 "user"     message 0 structure
	// 34 "\""       message 0 structure
	// 32773 "<|sep|>"  message 0 structure
	// 3866 "Hi"       message 0 user
	// 32772 "<|close|>" message 0 structure
	// 4359 "message"  message 0 structure
	// 32773 "<|sep|>"  message 0 structure
	// 32770 "<|end_of_msg|>" message 0 structure
}
