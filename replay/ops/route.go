package ops

// RouteQueuer is an optional interface of a Backend whose router can run ahead of the host. Route's
// result is on the host, so a device backend's Route waits for every op queued before it, copies the
// choices out and only then returns; the device idles from the end of that copy until the host has turned
// round and queued its next op. QueueRoute queues the router and the copy of its choices and returns at
// once: the ops the caller queues before Wait run on the device while the host waits, and hide the
// turnaround. The model queues an MoE layer's shared experts there, which do not depend on the routing.
//
// Contract: Wait returns, bit for bit, what Route(x, w, bias, k, scale) would have returned in
// QueueRoute's place, and QueueRoute fails where Route's checks of its arguments fail. x, w and bias must
// stay live until Wait returns. Wait must be called (a deferred call is enough); calls after the first
// return the first's result. Several routings may be pending at once.
type RouteQueuer interface {
	QueueRoute(x, w, bias Tensor, k int, scale float32) (PendingRouting, error)
}

// PendingRouting is a router's choice that QueueRoute queued: Wait blocks until it is on the host.
type PendingRouting interface {
	Wait() (Routing, error)
}

// QueueRoute queues b's router where b implements RouteQueuer, and otherwise runs b.Route at once and
// returns its result as already arrived.
func QueueRoute(b Backend, x, w, bias Tensor, k int, scale float32) (PendingRouting, error) {
	if q, ok := b.(RouteQueuer); ok {
		return q.QueueRoute(x, w, bias, k, scale)
	}
	r, err := b.Route(x, w, bias, k, scale)
	if err != nil {
		return nil, err
	}
	return Routed(r), nil
}

// Routed is a routing already on the host, as a PendingRouting.
type Routed Routing

// Wait returns the routing.
func (r Routed) Wait() (Routing, error) { return Routing(r), nil }
