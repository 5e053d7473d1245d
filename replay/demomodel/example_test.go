package demomodel_test

import (
	"context"
	"fmt"
	"os"

	"github.com/potato-k3/potato-k3/replay/demomodel"
	"github.com/potato-k3/potato-k3/replay/tokenizer"
)

// Write the demo model into a cache directory and load its tokenizer.
func ExampleDir() {
	cache, err := os.MkdirTemp("", "potato-cache-")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(cache)
	os.Setenv("POTATO_CACHE", cache) // where the model is written (synth.CacheDir's rule)
	dir, err := demomodel.Dir(context.Background(), os.Stderr)
	if err != nil {
		panic(err)
	}
	tok, err := tokenizer.Load(dir)
	if err != nil {
		panic(err)
	}
	fmt.Println(tok.Encode("Hello world"))
	// Output: [72 3033 322 274 1113]
}
