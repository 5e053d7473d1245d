package replay

import (
	"context"
	"errors"
	"sync"
)

// ErrClosed is returned for requests submitted to, or pending in, a closed queue.
var ErrClosed = errors.New("replay: queue closed")

// Queue gathers the requests of many callers into layer-major waves: whatever is queued when the engine
// becomes free goes through the weights together, so several callers share one pass over the 1.56 TB.
type Queue struct {
	e       *Engine
	maxToks int // a wave takes requests until it would pass this many tokens (0: no limit)
	mu      sync.Mutex
	pending []*Job
	wake    chan struct{}
	closed  bool
	done    chan struct{}
}

// Job is one submitted request: wait on Done, then read Results, Stats and Err.
type Job struct {
	Request Request
	ctx     context.Context
	done    chan struct{}
	Results []Result
	Stats   WaveStats // of the wave the job rode in
	Err     error
}

// Done is closed when the job has finished, failed or been cancelled.
func (j *Job) Done() <-chan struct{} { return j.done }

// NewQueue starts the wave loop on e. maxWaveTokens bounds the tokens of one wave (0: no bound); a single
// request larger than the bound still runs, alone.
func NewQueue(e *Engine, maxWaveTokens int) *Queue {
	q := &Queue{e: e, maxToks: maxWaveTokens, wake: make(chan struct{}, 1), done: make(chan struct{})}
	go q.loop()
	return q
}

// Submit queues a request. Cancelling ctx before its wave starts drops it; cancelling during its wave
// fails the job (the wave goes on for the others only if they did not share the cancellation).
func (q *Queue) Submit(ctx context.Context, r Request) (*Job, error) {
	if err := r.Validate(q.e.Model.Dims.Vocab, len(q.e.Plan.Layers), Limits{}); err != nil {
		return nil, err
	}
	j := &Job{Request: r, ctx: ctx, done: make(chan struct{})}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return nil, ErrClosed
	}
	q.pending = append(q.pending, j)
	select {
	case q.wake <- struct{}{}:
	default:
	}
	return j, nil
}

// Close stops the loop after the wave in flight; pending jobs fail with ErrClosed.
func (q *Queue) Close() {
	q.mu.Lock()
	if !q.closed {
		q.closed = true
		close(q.wake)
	}
	q.mu.Unlock()
	<-q.done
}

func (q *Queue) loop() {
	defer close(q.done)
	for range q.wake {
		for {
			wave := q.take()
			if len(wave) == 0 {
				break
			}
			q.run(wave)
		}
	}
	q.mu.Lock()
	for _, j := range q.pending {
		j.Err = ErrClosed
		close(j.done)
	}
	q.pending = nil
	q.mu.Unlock()
}

// take removes the next wave's jobs from the queue: live jobs in arrival order up to the token bound.
func (q *Queue) take() []*Job {
	q.mu.Lock()
	defer q.mu.Unlock()
	var wave []*Job
	tokens := 0
	rest := q.pending[:0]
	for _, j := range q.pending {
		if err := j.ctx.Err(); err != nil {
			j.Err = err
			close(j.done)
			continue
		}
		n := 0
		for _, s := range j.Request.Sequences {
			n += len(s.Tokens)
		}
		if len(wave) > 0 && q.maxToks > 0 && tokens+n > q.maxToks {
			rest = append(rest, j)
			continue
		}
		wave = append(wave, j)
		tokens += n
	}
	q.pending = rest
	return wave
}

// run executes one wave. The wave's context is cancelled only when every job in it is cancelled.
func (q *Queue) run(wave []*Job) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var live sync.WaitGroup
	live.Add(len(wave))
	for _, j := range wave {
		go func() {
			select {
			case <-j.ctx.Done():
			case <-ctx.Done():
			}
			live.Done()
		}()
	}
	go func() { live.Wait(); cancel() }()
	reqs := make([]Request, len(wave))
	for i, j := range wave {
		reqs[i] = j.Request
	}
	results, stats, err := q.e.Run(ctx, reqs)
	for i, j := range wave {
		switch {
		case j.ctx.Err() != nil:
			j.Err = j.ctx.Err()
		case err != nil:
			j.Err = err
		default:
			j.Results, j.Stats = results[i], stats
		}
		close(j.done)
	}
}
