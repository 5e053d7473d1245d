package cuda

import (
	"fmt"
	"sync"
	"unsafe"

	"github.com/potato-k3/potato-k3/cuda/bind"
	"github.com/potato-k3/potato-k3/replay/ops"
)

// The router queued (ops.RouteQueuer). Route downloads its choices before it returns: the host waits for
// the stream, wakes, copies the choices out of the staging buffer and only then queues the shared
// experts, and the device idles all that while (in the op profiles of run 121 a MoE layer's Route took
// 11.0 ms at 262,144 tokens in a kda+moe layer and 17.4 in a mla+moe layer, whose host is busier then,
// for the same kernels). QueueRoute queues the same kernels and the copy of the choices into a pinned
// buffer on the compute stream, then an event; Wait waits for that event (while the ops queued after
// QueueRoute keep the device busy) and copies the choices out. Run 123: Route 7.5-7.9 ms a layer in both
// kinds.

var _ ops.RouteQueuer = (*Backend)(nil)

// routeHost is the pinned buffer queued routings copy their choices into, and whether one holds it. On
// the CUDA thread.
type routeHost struct {
	buf  []byte
	busy bool
}

// routeHostGrain rounds the route buffer's size up, so that slices of slightly different sizes reuse it.
const routeHostGrain = 1 << 20

// QueueRoute implements ops.RouteQueuer: Route's kernels, the copy of the choices into the backend's
// pinned route buffer queued on the compute stream, and an event after it. One routing holds the buffer
// until its Wait; a QueueRoute meanwhile runs as Route (the same result, returned as arrived).
func (b *Backend) QueueRoute(x, w, bias ops.Tensor, k int, scale float32) (ops.PendingRouting, error) {
	const op = "Route"
	xt, wt, bt, err := b.routeTensors(op, x, w, bias, k)
	if err != nil {
		return nil, err
	}
	rows := xt.rows
	p := &queuedRoute{b: b, rt: ops.Routing{K: k, IDs: make([]int32, rows*k), Weights: make([]float32, rows*k)}}
	if rows == 0 {
		return ops.Routed(p.rt), nil
	}
	queued := false
	err = b.run(op, func(c *opCtx) error {
		ids, ws, err := c.routeRows(xt, wt, bt, k, scale)
		if err != nil {
			return err
		}
		if b.routes.busy { // another routing holds the buffer: Route's download
			return downloadRouting(b, p.rt, ids, ws)
		}
		n := 4 * rows * k // bytes of ids, and of weights
		buf, err := b.routeBuffer(2 * n)
		if err != nil {
			return err
		}
		if err := b.dv.ToHostQueued(buf[:n], ids); err != nil {
			return err
		}
		if err := b.dv.ToHostQueued(buf[n:2*n], ws); err != nil {
			return err
		}
		// recorded after the copies and before the op's temporaries are freed (stream-ordered frees,
		// which wait for the copies anyway)
		if p.ev, err = b.dv.SyncEvents().Record(b.drv, b.dv.Stream); err != nil {
			return err
		}
		b.routes.busy, queued = true, true
		return nil
	})
	if err != nil {
		return nil, err
	}
	if !queued {
		return ops.Routed(p.rt), nil
	}
	return p, nil
}

// routeBuffer returns the first n bytes of the route buffer, grown when it is shorter. On the CUDA
// thread, with no routing holding it.
func (b *Backend) routeBuffer(n int) ([]byte, error) {
	if len(b.routes.buf) >= n {
		return b.routes.buf[:n], nil
	}
	if err := b.releaseRouteBuffer(false); err != nil {
		return nil, err
	}
	size := (n + routeHostGrain - 1) / routeHostGrain * routeHostGrain
	p, err := b.dv.AllocPinned(size)
	if err != nil {
		return nil, fmt.Errorf("route buffer: %w", err)
	}
	b.routes.buf = unsafe.Slice((*byte)(p), size)
	return b.routes.buf[:n], nil
}

// releaseRouteBuffer frees the route buffer (at Close synced: the streams are synchronised already).
func (b *Backend) releaseRouteBuffer(synced bool) error {
	if b.routes.buf == nil {
		return nil
	}
	p := uintptr(unsafe.Pointer(unsafe.SliceData(b.routes.buf)))
	b.routes.buf, b.routes.busy = nil, false
	return b.dv.FreePinned(p, synced)
}

// queuedRoute is a routing QueueRoute queued: its choices arrive in the route buffer when the stream
// passes ev.
type queuedRoute struct {
	b    *Backend
	ev   uintptr
	rt   ops.Routing
	once sync.Once
	err  error
}

// Wait implements ops.PendingRouting: it waits for the copies and takes the choices out of the route
// buffer, which it frees for the next routing.
func (p *queuedRoute) Wait() (ops.Routing, error) {
	p.once.Do(func() {
		b := p.b
		p.err = b.ex.Do(func() error {
			if b.dv == nil || !b.routes.busy { // closed since: the buffer went with the backend
				return ErrClosed
			}
			dr := b.drv
			err := dr.Check("cuEventSynchronize(route)", bind.Call(dr.CuEventSynchronize, p.ev))
			b.dv.SyncEvents().Put(p.ev)
			if err == nil {
				n := 4 * len(p.rt.IDs)
				copy(bytesOf(p.rt.IDs), b.routes.buf[:n])
				copy(bytesOf(p.rt.Weights), b.routes.buf[n:2*n])
			}
			b.routes.busy = false
			return err
		})
		if p.err != nil {
			p.err = fmt.Errorf("cuda: Route (queued): %w", withOOM(p.err))
			p.rt = ops.Routing{}
		}
	})
	return p.rt, p.err
}
