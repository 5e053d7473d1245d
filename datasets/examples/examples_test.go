package examples_test

import (
	"errors"
	"testing"

	"github.com/potato-k3/potato-k3/datasets/examples"
	"github.com/potato-k3/potato-k3/replay/tokenizer"
)

func TestAll(t *testing.T) {
	all := examples.All()
	if len(all) == 0 {
		t.Fatal("no bundled examples parsed")
	}
	seen := map[string]bool{}
	for i, c := range all {
		if c.ID == "" || seen[c.ID] {
			t.Errorf("example %d: id %q empty or repeated", i, c.ID)
		}
		seen[c.ID] = true
		if c.Thinking == tokenizer.ThinkingUnset {
			t.Errorf("example %s: no thinking mode", c.ID)
		}
		if len(c.Messages) == 0 {
			t.Errorf("example %s: no messages", c.ID)
		}
	}
}

func TestGet(t *testing.T) {
	c, err := examples.Get("greeting")
	if err != nil || c.ID != "greeting" || len(c.Messages) == 0 {
		t.Fatalf("Get(greeting) = %+v, %v", c, err)
	}
	c.Messages[0].Content = "changed" // a fresh copy each time
	if again, _ := examples.Get("greeting"); again.Messages[0].Content == "changed" {
		t.Error("Get returns shared state")
	}
	if _, err := examples.Get("nope"); !errors.Is(err, examples.ErrUnknown) {
		t.Errorf("Get(nope) error %v, want ErrUnknown", err)
	}
}
