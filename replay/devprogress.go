package replay

import (
	"sync"
	"time"
)

// groupProgress turns the devices' per-layer progress into the one line of a wave over devices: a layer
// is done when every device has done it, the bytes are those the feed read once, and the plan is the
// combined plan line.
type groupProgress struct {
	user   func(Progress) // EngineOptions.Progress of the engine the caller holds; nil: none
	f      *feed
	start  time.Time
	tokens int
	plan   string
	mu     sync.Mutex
	done   []int // per device: layers done
	shown  int   // layers reported to user
}

// newGroupProgress reports to user (nil: nothing) for a wave of tokens over n devices.
func newGroupProgress(user func(Progress), f *feed, n, tokens int, plan string) *groupProgress {
	return &groupProgress{user: user, f: f, start: time.Now(), tokens: tokens, plan: plan, done: make([]int, n)}
}

// device is the EngineOptions.Progress of device k's engine for the wave (nil when there is no user).
func (g *groupProgress) device(k int) func(Progress) {
	if g.user == nil {
		return nil
	}
	return func(p Progress) {
		g.mu.Lock()
		defer g.mu.Unlock()
		g.done[k] = p.Layer
		lo := p.Layer
		for _, n := range g.done {
			lo = min(lo, n)
		}
		if lo <= g.shown {
			return
		}
		g.shown = lo
		el := time.Since(g.start).Seconds()
		g.user(Progress{Layer: lo, Layers: p.Layers, Tokens: g.tokens, BytesRead: g.f.read.Load(), Seconds: el,
			ETASeconds: el / float64(lo) * float64(p.Layers-lo), Plan: g.plan})
	}
}
