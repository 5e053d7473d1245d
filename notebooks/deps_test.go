package notebooks_test

// The notebooks run code this test binary never calls: the engine inside the potato command, and the
// packages the cells import. Importing them here makes the test binary, and so the result go test
// caches, depend on them: a change to any of them runs the notebooks again instead of reporting a
// cached pass.
import (
	_ "github.com/potato-k3/potato-k3/datasets"
	_ "github.com/potato-k3/potato-k3/kernel/display"
	_ "github.com/potato-k3/potato-k3/kernel/server"
	_ "github.com/potato-k3/potato-k3/plotting"
	_ "github.com/potato-k3/potato-k3/replay"
	_ "github.com/potato-k3/potato-k3/replay/checkpoint"
	_ "github.com/potato-k3/potato-k3/replay/cpu"
	_ "github.com/potato-k3/potato-k3/replay/model"
	_ "github.com/potato-k3/potato-k3/replay/ops"
	_ "github.com/potato-k3/potato-k3/replay/synth"
	_ "github.com/potato-k3/potato-k3/replay/tables"
	_ "github.com/potato-k3/potato-k3/replay/tokenizer"
)
