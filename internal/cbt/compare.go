package cbt

import (
	"bytes"
	"context"
	"io"
	"os"
)

// compareChunk is what one read of each image covers: large enough that
// the reads stream, small enough that a cancelled call stops at once and
// two buffers cost little.
const compareChunk = 1 << 20

// CompareData finds the changed blocks where maps cannot: images that are
// copies (an ext4 pool, or a reflink that fell back to a copy) share no
// extent, so every block of theirs would differ by the maps. It reads
// both images over candidates (ordered ranges holding data in either:
// elsewhere both read as zeros) from the block holding from on, and calls
// add with each BlockSize block of [0, targetSize) whose bytes differ, in
// order. Past baseSize the base reads as zeros (the volume grew).
//
// Its cost is the data: every candidate byte is read from both images,
// about twice what the volume holds, against none for Delta. It returns
// the bytes read.
func CompareData(ctx context.Context, base, target *os.File, baseSize, targetSize int64, candidates []Range, from int64, add func(Range) error) (int64, error) {
	bb, tb := make([]byte, compareChunk), make([]byte, compareChunk)
	var read int64
	for _, c := range candidates {
		start := max(c.Offset, from) / BlockSize * BlockSize
		end := min(c.End(), targetSize)
		for off := start; off < end; off += compareChunk {
			if err := ctx.Err(); err != nil {
				return read, err
			}
			n := min(compareChunk, alignUp(end)-off)
			nt, err := readFull(target, tb[:n], off, targetSize)
			if err != nil {
				return read, err
			}
			nb, err := readFull(base, bb[:n], off, baseSize)
			if err != nil {
				return read, err
			}
			read += nt + nb
			for k := int64(0); k < n && off+k < targetSize; k += BlockSize {
				if !bytes.Equal(bb[k:k+BlockSize], tb[k:k+BlockSize]) {
					if err := add(Range{off + k, min(BlockSize, targetSize-off-k)}); err != nil {
						return read, err
					}
				}
			}
		}
	}
	return read, nil
}

func alignUp(n int64) int64 { return (n + BlockSize - 1) / BlockSize * BlockSize }

// readFull fills buf from f at off as a volume reads: past size, or past
// the file's end, zeros. It returns the bytes read from the file.
func readFull(f *os.File, buf []byte, off, size int64) (int64, error) {
	want := max(0, min(int64(len(buf)), size-off))
	n, err := f.ReadAt(buf[:want], off)
	if err == io.EOF {
		err = nil
	}
	clear(buf[n:])
	return int64(n), err
}
