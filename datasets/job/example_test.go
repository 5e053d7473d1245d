package job_test

import (
	"fmt"

	"github.com/potato-k3/potato-k3/datasets/job"
)

// Three machines each take one shard of a dataset: every conversation goes to exactly one of them, by
// its id alone.
func Example_shards() {
	ids := []string{"greeting", "line:2", "row:7", "tool-weather"}
	for i := 0; i < 3; i++ {
		shard, _ := job.ParseShard(fmt.Sprintf("%d/3", i))
		var mine []string
		for _, id := range ids {
			if shard.Has(id) {
				mine = append(mine, id)
			}
		}
		fmt.Println(shard, mine)
	}
	// Output:
	// 0/3 [greeting]
	// 1/3 [line:2 tool-weather]
	// 2/3 [row:7]
}
