package synth

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"sync"

	"github.com/potato-k3/potato-k3/replay/bf16"
	"github.com/potato-k3/potato-k3/replay/checkpoint"
)

// filler produces the bytes of rows [r0, r1) of one tensor into dst (len(dst) = (r1-r0) * row bytes).
// Rows are the first dimension (a 1-D tensor is one row). Implementations draw row r from its own stream,
// so any split of a tensor into row ranges, filled in any order, gives the same bytes.
type filler interface {
	fill(dst []byte, r0, r1 int)
}

// rows returns the number of rows and the bytes per row of a tensor as fillers see it.
func rows(s checkpoint.Spec) (n int, rowBytes int64) {
	if len(s.Shape) < 2 {
		return 1, s.Bytes()
	}
	return int(s.Shape[0]), s.Bytes() / s.Shape[0]
}

// floatRows is a filler for BF16 and F32 tensors whose row r is computed in float32 by row and then
// narrowed (BF16 with round-to-nearest-even) or stored as is (F32), little-endian.
type floatRows struct {
	key   uint64
	cols  int
	dtype checkpoint.DType
	row   func(r int, g *rng, out []float32)
}

func (f *floatRows) fill(dst []byte, r0, r1 int) {
	buf := make([]float32, f.cols)
	size := 2
	if f.dtype == checkpoint.F32 {
		size = 4
	}
	for r := r0; r < r1; r++ {
		g := stream(f.key, r)
		f.row(r, &g, buf)
		out := dst[(r-r0)*f.cols*size : (r-r0+1)*f.cols*size]
		if size == 2 {
			bf16.Encode(out, buf)
			continue
		}
		for i, v := range buf {
			binary.LittleEndian.PutUint32(out[4*i:], math.Float32bits(v))
		}
	}
}

// jobBytes is the most data one fill job produces: large enough that scheduling costs nothing, small
// enough that a few jobs per worker in flight stay within a few tens of MB.
const jobBytes = 1 << 20

// fillPool fills tensors on several goroutines and hands the bytes to one writer in file order.
type fillPool struct {
	workers  int
	build    *builder
	progress *progress
	bufs     sync.Pool // of *[]byte
}

type fillJob struct {
	f      filler
	r0, r1 int
	buf    *[]byte // from the pool (buffer), back to it once written
	done   chan struct{}
}

// stream generates the tensors in order and writes their bytes to w. Jobs are filled concurrently;
// the writer waits for each in turn, so at most a bounded number of jobs are in flight.
func (p *fillPool) stream(ctx context.Context, tensors []Placed, w io.Writer) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	work := make(chan *fillJob)
	order := make(chan *fillJob, 4*p.workers)
	var wg sync.WaitGroup
	for range p.workers {
		wg.Go(func() {
			for j := range work {
				j.f.fill(*j.buf, j.r0, j.r1)
				close(j.done)
			}
		})
	}
	prodErr := make(chan error, 1)
	go func() {
		defer close(order)
		defer close(work)
		prodErr <- p.produce(ctx, tensors, work, order)
	}()
	var werr error
	for j := range order {
		<-j.done
		if werr == nil && ctx.Err() == nil {
			if _, err := w.Write(*j.buf); err != nil {
				werr = err
				cancel()
			}
			p.progress.add(int64(len(*j.buf)))
		}
		p.bufs.Put(j.buf)
	}
	wg.Wait()
	if err := <-prodErr; err != nil && werr == nil {
		return err
	}
	if werr != nil {
		return fmt.Errorf("writing data: %w", werr)
	}
	return ctx.Err()
}

// produce splits each tensor into jobs of whole rows and queues them, in order, to the workers and the
// writer.
func (p *fillPool) produce(ctx context.Context, tensors []Placed, work, order chan<- *fillJob) error {
	for _, t := range tensors {
		f, err := p.build.filler(t.Spec)
		if err != nil {
			return fmt.Errorf("tensor %s: %w", t.Name, err)
		}
		n, rowBytes := rows(t.Spec)
		step := max(1, int(jobBytes/rowBytes))
		for r0 := 0; r0 < n; r0 += step {
			r1 := min(n, r0+step)
			j := &fillJob{f: f, r0: r0, r1: r1, buf: p.buffer(int64(r1-r0) * rowBytes), done: make(chan struct{})}
			select {
			case order <- j:
			case <-ctx.Done():
				return ctx.Err()
			}
			select {
			case work <- j:
			case <-ctx.Done():
				close(j.done) // the writer waits on every queued job
				return ctx.Err()
			}
		}
	}
	return nil
}

// buffer is a buffer of n bytes from the pool, or a new one. It goes back as the pointer it came as: a
// slice put in a sync.Pool by value would be copied to the heap each time.
func (p *fillPool) buffer(n int64) *[]byte {
	if b, ok := p.bufs.Get().(*[]byte); ok && int64(cap(*b)) >= n {
		*b = (*b)[:n]
		return b
	}
	b := make([]byte, n, max(n, jobBytes))
	return &b
}
