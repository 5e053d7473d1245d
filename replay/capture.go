package replay

import (
	"time"

	"github.com/potato-k3/potato-k3/replay/model"
	"github.com/potato-k3/potato-k3/replay/ops"
)

// capture is the model.Observer of a wave: it keeps the routing and AttnRes weights the wave's requests
// asked for, over the whole wave, to be split per sequence at the end.
type capture struct {
	router, mixes bool
	routing       []layerRouting
	mixList       []waveMix
	seen          map[mixKey]bool
	routedAt      time.Time // when the last router returned (for Progress.RoutedSeconds)
}

type layerRouting struct {
	layer int
	r     ops.Routing
}

type mixKey struct {
	layer int
	site  model.Site
}

type waveMix struct {
	mixKey
	n       int
	weights []float32
}

// Wants implements model.Wanter: a sliced pass gathers only what the wave's requests asked for.
func (c *capture) Wants() (routing, mixes bool) { return c.router, c.mixes }

// Routing implements model.Observer.
func (c *capture) Routing(layer int, r ops.Routing) {
	c.routedAt = time.Now()
	if c.router {
		c.routing = append(c.routing, layerRouting{layer, r})
	}
}

// Mix implements model.Observer. The output mix of the last layer is taken twice when the lens asks for
// that layer; both are the same computation, so the first is kept.
func (c *capture) Mix(layer int, site model.Site, weights []float32, n int) {
	if !c.mixes {
		return
	}
	k := mixKey{layer, site}
	if c.seen[k] {
		return
	}
	if c.seen == nil {
		c.seen = make(map[mixKey]bool)
	}
	c.seen[k] = true
	c.mixList = append(c.mixList, waveMix{k, n, weights})
}
