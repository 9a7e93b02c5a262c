package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/bits"
	"math/rand/v2"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// The writes of the changed-block tracking phase: a base pattern, then
// changes to a share of the volume's 4 KiB blocks at random places, each
// written through the published block device with direct I/O as a pod
// would. Every block's bytes follow from (run key, block, generation), so
// a block can be rewritten with exactly the bytes it holds.

const (
	cbtBlock = 4096
	// The base pattern: cbtBaseRun bytes of data at the start of every
	// cbtBaseEvery bytes (1/64 of the volume: 1 GiB of a 64 GiB volume),
	// so the volume is thin, as most are, yet holds data to change.
	cbtBaseRun   = 1 << 20
	cbtBaseEvery = 64 << 20
	// cbtWriters write at once (queue depth), each a run of adjacent
	// changed blocks (at most cbtMaxRun bytes) per call.
	cbtWriters = 4
	cbtMaxRun  = 1 << 20
)

// cbtWork is one volume's content as the harness wrote it.
type cbtWork struct {
	key    uint64
	blocks int64
	gen    []uint8 // generation of each block's bytes; 0: never written (zeros)
	rng    *rand.Rand
	next   uint8 // the generation the next change writes
}

// cbtChange is what one change between two snapshots wrote.
type cbtChange struct {
	blocks      int64 // distinct 4 KiB blocks written
	same        int64 // of which rewritten with the bytes they held
	sameOnHoles int64 // of those, blocks never written before (zeros rewritten)
	took        time.Duration
}

func (c cbtChange) bytes() int64 { return c.blocks * cbtBlock }

func newCbtWork(size int64, key uint64) *cbtWork {
	n := size / cbtBlock
	return &cbtWork{key: key, blocks: n, gen: make([]uint8, n), rng: rand.New(rand.NewPCG(key, 0x63627462)), next: 1}
}

// fill writes block blk's bytes of generation g into buf (cbtBlock bytes).
func (w *cbtWork) fill(buf []byte, blk int64, g uint8) {
	if g == 0 {
		clear(buf)
		return
	}
	r := rand.NewPCG(w.key^uint64(blk)*0x9e3779b97f4a7c15, uint64(g))
	for i := 0; i < len(buf); i += 8 {
		binary.LittleEndian.PutUint64(buf[i:], r.Uint64())
	}
}

// writeBase writes the base pattern.
func (w *cbtWork) writeBase(ctx context.Context, dev string) (cbtChange, error) {
	g := w.next
	w.next++
	var picked []int64
	per := int64(cbtBaseRun / cbtBlock)
	for start := int64(0); start < w.blocks; start += cbtBaseEvery / cbtBlock {
		for b := start; b < min(start+per, w.blocks); b++ {
			w.gen[b] = g
			picked = append(picked, b)
		}
	}
	t := time.Now()
	err := w.write(ctx, dev, picked)
	return cbtChange{blocks: int64(len(picked)), took: time.Since(t)}, err
}

// change writes pct % of the volume's blocks, distinct, at random places;
// sameShare of them get the bytes they already hold, the rest new random
// bytes.
func (w *cbtWork) change(ctx context.Context, dev string, pct, sameShare float64) (cbtChange, error) {
	n := int64(float64(w.blocks) * pct / 100)
	seen := make([]uint64, (w.blocks+63)/64)
	for got := int64(0); got < n; {
		b := w.rng.Int64N(w.blocks)
		if seen[b/64]&(1<<(b%64)) == 0 {
			seen[b/64] |= 1 << (b % 64)
			got++
		}
	}
	g := w.next
	w.next++
	c := cbtChange{blocks: n}
	picked := make([]int64, 0, n)
	for i, word := range seen { // ascending block order: runs coalesce
		for word != 0 {
			b := int64(i)*64 + int64(bits.TrailingZeros64(word))
			word &= word - 1
			picked = append(picked, b)
			if w.rng.Float64() < sameShare {
				c.same++
				if w.gen[b] == 0 {
					c.sameOnHoles++
				}
				continue
			}
			w.gen[b] = g
		}
	}
	t := time.Now()
	err := w.write(ctx, dev, picked)
	c.took = time.Since(t)
	return c, err
}

// nonZeroBytes is what the volume holds that is not zeros.
func (w *cbtWork) nonZeroBytes() int64 {
	var n int64
	for _, g := range w.gen {
		if g != 0 {
			n++
		}
	}
	return n * cbtBlock
}

// write writes the blocks (ascending) with their current generation's
// bytes: cbtWriters at once, each a contiguous share of the list, adjacent
// blocks in one call. It ends with an fsync, so the snapshot taken next
// holds every byte.
func (w *cbtWork) write(ctx context.Context, dev string, picked []int64) error {
	f, err := os.OpenFile(dev, os.O_WRONLY|unix.O_DIRECT, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	var wg sync.WaitGroup
	errs := make([]error, cbtWriters)
	per := (len(picked) + cbtWriters - 1) / cbtWriters
	for k := range cbtWriters {
		part := picked[min(k*per, len(picked)):min((k+1)*per, len(picked))]
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[k] = w.writeRuns(ctx, f, part)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return f.Sync()
}

func (w *cbtWork) writeRuns(ctx context.Context, f *os.File, part []int64) error {
	// Direct I/O wants an aligned buffer: an anonymous mapping is.
	buf, err := unix.Mmap(-1, 0, cbtMaxRun, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANON)
	if err != nil {
		return err
	}
	defer unix.Munmap(buf)
	for i := 0; i < len(part); {
		if err := ctx.Err(); err != nil {
			return err
		}
		j := i + 1
		for j < len(part) && part[j] == part[j-1]+1 && (j-i)*cbtBlock < cbtMaxRun {
			j++
		}
		for k := i; k < j; k++ {
			w.fill(buf[(k-i)*cbtBlock:(k-i+1)*cbtBlock], part[k], w.gen[part[k]])
		}
		if _, err := f.WriteAt(buf[:(j-i)*cbtBlock], part[i]*cbtBlock); err != nil {
			return fmt.Errorf("write %d bytes at %d: %w", (j-i)*cbtBlock, part[i]*cbtBlock, err)
		}
		i = j
	}
	return nil
}
