package datasets

import (
	"fmt"
	"sync"

	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/klauspost/compress/snappy"
	"github.com/klauspost/compress/zstd"
)

// arrow-go decodes a Parquet page into a buffer of the page's declared size (at most
// parquet.DefaultMaxUncompressedPageSize), but its zstd and snappy codecs size their output from the
// compressed block's own header instead: a page of a few bytes may claim gigabytes (zstd up to 64 GB),
// and the allocation is made before anything is decoded. A runtime out-of-memory is no panic and
// nothing recovers it, so one damaged or hostile dataset file would kill the process (the fuzzer found
// a 1 kB file that allocated 2.8 GB). These wrappers bound each block by the page's declared size;
// valid files decode exactly as before (a page decodes to exactly its declared size). Registering them
// replaces arrow-go's codecs for the whole process, which only ever removes an unbounded allocation.
func init() {
	for _, c := range []struct {
		typ  compress.Compression
		wrap func(compress.Codec) compress.Codec
	}{
		{compress.Codecs.Zstd, func(c compress.Codec) compress.Codec { return boundedZstd{c} }},
		{compress.Codecs.Snappy, func(c compress.Codec) compress.Codec { return boundedSnappy{c} }},
	} {
		if orig, err := compress.GetCodec(c.typ); err == nil {
			compress.RegisterCodec(c.typ, c.wrap(orig))
		}
	}
}

// maxBlock bounds a block decoded without a destination buffer (arrow-go always gives one today).
const maxBlock = parquet.DefaultMaxUncompressedPageSize

// zstdDecoder decodes whole blocks, never growing the destination past its capacity.
var zstdDecoder = sync.OnceValues(func() (*zstd.Decoder, error) {
	return zstd.NewReader(nil, zstd.WithDecodeAllCapLimit(true), zstd.WithDecoderMaxMemory(uint64(maxBlock)))
})

// boundedZstd is arrow-go's zstd codec whose block decoding stays inside the page's buffer.
type boundedZstd struct{ compress.Codec }

func (c boundedZstd) Decode(dst, src []byte) []byte {
	out, err := c.DecodeWithError(dst, src)
	if err != nil {
		panic(err) // arrow-go's Codec contract; compress.Decode calls DecodeWithError instead
	}
	return out
}

func (boundedZstd) DecodeWithError(dst, src []byte) ([]byte, error) {
	d, err := zstdDecoder()
	if err != nil {
		return nil, err
	}
	if dst == nil {
		dst = make([]byte, 0, maxBlock)
	}
	return d.DecodeAll(src, dst[:0:len(dst)])
}

// boundedSnappy is arrow-go's snappy codec refusing a block whose header claims more than the page.
type boundedSnappy struct{ compress.Codec }

func (c boundedSnappy) Decode(dst, src []byte) []byte {
	out, err := c.DecodeWithError(dst, src)
	if err != nil {
		panic(err)
	}
	return out
}

func (boundedSnappy) DecodeWithError(dst, src []byte) ([]byte, error) {
	n, err := snappy.DecodedLen(src)
	if err != nil {
		return nil, err
	}
	limit := len(dst)
	if dst == nil {
		limit = int(maxBlock)
	}
	if n > limit {
		return nil, fmt.Errorf("snappy block decodes to %d bytes, more than its page's %d", n, limit)
	}
	return snappy.Decode(dst, src)
}
