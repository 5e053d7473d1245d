package replay

import "github.com/potato-k3/potato-k3/replay/ops"

// hostAdopter is an optional interface of a backend (the CUDA backend's AdoptHost and ForgetHost): it
// can copy directly from host memory another backend of the process allocated, once told of the buffer.
// Without it a device uploads from the feed's buffers as from ordinary memory (staged: slower, the
// same bits).
type hostAdopter interface {
	AdoptHost(buf []byte) error
	ForgetHost(buf []byte)
}

// sharedHost is the host memory of the feed's pool in a wave over devices: device 0's (the primary
// engine's backend), each buffer also registered with the other devices' backends that can adopt it, so
// that every device's copy engine reads the one buffer the checkpoint was read into. Only device 0 may
// mark a buffer stable (its uploads from it then need not wait); the others always wait for their copies,
// so a buffer is free to go once every device has returned from uploading it.
type sharedHost struct {
	own    ops.HostMemory
	others []hostAdopter
}

// shareHost makes pool's memory shared with the backends of others that can adopt it (a no-op when the
// pool has no backend memory or none can).
func shareHost(pool *hostPool, others []ops.Backend) {
	if pool.mem == nil {
		return
	}
	s := &sharedHost{own: pool.mem}
	for _, b := range others {
		if a, ok := b.(hostAdopter); ok {
			s.others = append(s.others, a)
		}
	}
	if len(s.others) > 0 {
		pool.mem = s
	}
}

// AllocHost implements ops.HostMemory: device 0's buffer, adopted by the others (a device that refuses
// it copies from it staged).
func (s *sharedHost) AllocHost(n int) ([]byte, error) {
	buf, err := s.own.AllocHost(n)
	if err != nil {
		return nil, err
	}
	for _, a := range s.others {
		_ = a.AdoptHost(buf) // refused: that device stages its copies, with the same bits
	}
	return buf, nil
}

// FreeHost implements ops.HostMemory: the others forget the buffer, then device 0 frees it.
func (s *sharedHost) FreeHost(buf []byte) error {
	for _, a := range s.others {
		a.ForgetHost(buf)
	}
	return s.own.FreeHost(buf)
}

// MarkStable implements ops.StableHostMemory for device 0 alone (nothing to do when its backend has no
// stable memory).
func (s *sharedHost) MarkStable(buf []byte) error {
	if st, ok := s.own.(ops.StableHostMemory); ok {
		return st.MarkStable(buf)
	}
	return nil
}
