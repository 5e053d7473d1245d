package api_test

import (
	"encoding/json"
	"fmt"

	"github.com/potato-k3/potato-k3/kernel/api"
)

// The body of a job request and the paths that follow a job.
func Example() {
	req := api.Request{
		Inputs:  []api.Input{api.TextInput("The quick brown fox"), {Tokens: []int32{1, 2, 3}}},
		Options: api.Options{TopK: 5, Lens: []int{0, 3}},
	}
	body, _ := json.Marshal(req)
	fmt.Println(string(body))
	fmt.Println(api.ProgressPath("0123456789abcdef"))
	fmt.Println(api.TablePath("0123456789abcdef", "tokens"))
	fmt.Println(api.StateQueued.Terminal(), api.StateCancelled.Terminal())
	// Output:
	// {"inputs":[{"text":"The quick brown fox"},{"tokens":[1,2,3]}],"options":{"top_k":5,"lens":[0,3]}}
	// /v1/jobs/0123456789abcdef/progress
	// /v1/jobs/0123456789abcdef/tables/tokens
	// false true
}
