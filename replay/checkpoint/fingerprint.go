package checkpoint

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"strconv"
)

// Samples of a shard's tensor data that Fingerprint reads: fingerprintSamples ranges of
// fingerprintBytes, spread evenly from the first byte of the data to the last (128 KiB a shard, 12 MB
// for K3's 96 shards).
const (
	fingerprintSamples = 8
	fingerprintBytes   = 16 << 10
)

// fingerprintDomain versions the fingerprint and keeps it apart from any other SHA-256 of the same bytes.
const fingerprintDomain = "potato-k3 checkpoint sample v1\n"

// Fingerprint is a hex SHA-256 that tells checkpoints apart by their contents without reading them
// whole: over every shard, in file-name order, its name, size and tensor table (each tensor's name,
// dtype, shape, offset and size), and a sample of its tensor data (fingerprintSamples ranges of
// fingerprintBytes from first byte to last). Two checkpoints of one architecture with other weights (a
// base and an instruct model, two revisions) differ wherever the samples fall, so their fingerprints
// differ; it is not a checksum of every byte, and two checkpoints that differ only in bytes no sample
// reads share one. Results record it beside config.json's hash, so that a dataset job never resumes or
// merges with rows of other weights under an unchanged config.
func (d *Dir) Fingerprint(ctx context.Context) (string, error) {
	h := sha256.New()
	io.WriteString(h, fingerprintDomain)
	buf := make([]byte, fingerprintBytes)
	var line []byte // a tensor's entry, built with appends: fmt took 0.4 s over K3's 497,000 tensors
	for _, s := range d.shards {
		if err := ctx.Err(); err != nil {
			return "", fmt.Errorf("checkpoint: fingerprint: %w", err)
		}
		fmt.Fprintf(h, "shard %q %d %d\n", s.hdr.File, s.hdr.Size, len(s.hdr.Tensors))
		for _, t := range s.hdr.Tensors {
			line = strconv.AppendQuote(line[:0], t.Name)
			line = append(append(line, ' '), t.DType...)
			for _, n := range t.Shape {
				line = strconv.AppendInt(append(line, ' '), n, 10)
			}
			line = strconv.AppendInt(append(line, " @ "...), t.Offset, 10)
			line = strconv.AppendInt(append(line, ' '), t.Size, 10)
			h.Write(append(line, '\n'))
		}
		if err := sampleShard(h, s, buf); err != nil {
			return "", err
		}
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// sampleShard writes shard s's sampled data ranges, each after its offset, to w.
func sampleShard(w io.Writer, s *shard, buf []byte) error {
	lo, hi := s.hdr.DataStart, s.hdr.Size
	if hi <= lo {
		return nil
	}
	f, err := os.Open(s.path)
	if err != nil {
		return fmt.Errorf("checkpoint: fingerprint: %w", err)
	}
	defer f.Close()
	n := int64(len(buf))
	for i := range int64(fingerprintSamples) {
		off := lo
		if span := hi - lo - n; span > 0 {
			off += span * i / (fingerprintSamples - 1)
		} else if i > 0 {
			break // the whole data section fits one sample
		}
		b := buf[:min(n, hi-off)]
		if _, err := f.ReadAt(b, off); err != nil {
			return fmt.Errorf("checkpoint: fingerprint: %s: reading %d bytes at %d: %w", s.path, len(b), off, err)
		}
		var o [8]byte
		binary.LittleEndian.PutUint64(o[:], uint64(off))
		w.Write(o[:])
		w.Write(b)
	}
	return nil
}
