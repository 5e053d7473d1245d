package cuda

import (
	"errors"
	"fmt"
	"runtime"
	"sync"

	"github.com/potato-k3/potato-k3/replay/ops"
)

var _ ops.ExpertBatchUploader = (*Backend)(nil)

// UploadExperts implements ops.ExpertBatchUploader. When every part of every expert lies in stable host
// memory (stable.go) the experts not checked before are checked on all cores at once, and one trip to
// the CUDA thread queues every copy, each expert's followed by its event: no host wait at all. Otherwise
// it is UploadExpert for each expert in turn.
func (b *Backend) UploadExperts(latent, ffn int, parts []ops.ExpertParts) ([]ops.Expert, error) {
	const op = "UploadExperts"
	all := make([][6][]byte, len(parts))
	stable := true
	for i, p := range parts {
		all[i] = [6][]byte{p.W1Packed, p.W1Scale, p.W3Packed, p.W3Scale, p.W2Packed, p.W2Scale}
		stable = stable && p.ID >= 0 && b.stableHost(all[i][:]...)
	}
	if !stable || latent <= 0 || ffn <= 0 || latent%2 != 0 || ffn%2 != 0 {
		return b.uploadEach(latent, ffn, parts)
	}
	if err := b.checkExperts(op, latent, ffn, parts, all); err != nil {
		return nil, err
	}
	es := make([]*Expert, len(parts))
	sizes := make([]int, len(parts))
	padded := make([]bool, len(parts))
	for i, p := range parts {
		e := &Expert{b: b, id: p.ID, latent: latent, ffn: ffn}
		for j, part := range all[i] { // UploadExpert's layout: each part 256-byte aligned
			e.off[j] = sizes[i]
			sizes[i] = (sizes[i] + len(part) + 255) &^ 255
			padded[i] = padded[i] || len(part)%256 != 0
		}
		es[i] = e
	}
	err := b.run(op, func(c *opCtx) error {
		for i, e := range es {
			p, err := b.mallocCopy(sizes[i])
			if err == nil {
				if err = b.fillExpert(p, sizes[i], padded[i], true, all[i], e.off); err == nil {
					e.ptr = p
					err = b.recordUpload(e)
				} else {
					err = errors.Join(err, b.syncCopy(), b.free(p))
				}
			}
			if err != nil { // free the batch's experts so far, after their copies
				errs := []error{b.syncCopy()}
				for _, done := range es[:i+1] {
					errs = append(errs, b.joinExpertFree(done))
					if done.ptr != 0 {
						errs = append(errs, b.free(done.ptr))
						done.ptr = 0
					}
					done.freed = true
				}
				return fmt.Errorf("expert %d: %w (freeing the batch: %v)", e.id, err, errors.Join(errs...))
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	out := make([]ops.Expert, len(es))
	for i, e := range es {
		out[i] = e
	}
	return out, nil
}

// uploadEach is UploadExperts by UploadExpert, freeing what it made on an error.
func (b *Backend) uploadEach(latent, ffn int, parts []ops.ExpertParts) ([]ops.Expert, error) {
	out := make([]ops.Expert, 0, len(parts))
	for _, p := range parts {
		e, err := b.UploadExpert(p.ID, latent, ffn, p.W1Packed, p.W1Scale, p.W3Packed, p.W3Scale, p.W2Packed, p.W2Scale)
		if err != nil {
			for _, done := range out {
				b.Free(done)
			}
			return nil, err
		}
		out = append(out, e)
	}
	return out, nil
}

// checkExperts runs UploadExpert's checks on the experts of a stable batch that were never checked, on
// all cores, and returns the error of the first failing expert in batch order (what uploading them one
// by one reports).
func (b *Backend) checkExperts(op string, latent, ffn int, parts []ops.ExpertParts, all [][6][]byte) error {
	errs := make([]error, len(parts))
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(runtime.GOMAXPROCS(0), len(parts)) {
		wg.Go(func() {
			for i := range next {
				errs[i] = checkExpert(op, parts[i].ID, latent, ffn, all[i])
				if errs[i] == nil {
					b.hosts.markChecked(all[i])
				}
			}
		})
	}
	for i := range parts {
		if !b.hosts.checkedBefore(all[i]) {
			next <- i
		}
	}
	close(next)
	wg.Wait()
	return firstErr(errs)
}

// firstErr is the first non-nil error of errs, or nil.
func firstErr(errs []error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
