package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// On ext4 without a journal (the bench VM's root filesystem) the kernel
// will not reuse an inode freed less than a minute ago, six while its
// inode table block is dirty (recently_deleted in fs/ext4/ialloc.c), and
// finds that out by looking at each freed inode of the block group on
// every allocation. A bench run frees some 12,000 inodes when it cleans
// up, in the block group the next run's pool gets, and the next run's own
// creates keep those inode table blocks dirty: a run started within six
// minutes of the last one measures that scan (up to 1 ms of CPU per file
// the driver creates) rather than the driver. Measured, same driver each
// time: 8-client throughput 2,739/s in one run, 1,758/s in a run whose
// throughput phase came 5m11s after the last run's deletes.
//
// So the harness notes when a run ended and, on such a filesystem, waits
// out the rest of the six minutes before it measures. The wait is in the
// report; --settle 0 skips it.
const recentlyFreedFor = 6*time.Minute + 15*time.Second

// lastRunFile holds the Unix time (ns) at which the last run finished.
const lastRunFile = benchRoot + ".last-run"

// settle waits until the last run's freed inodes no longer slow allocation
// on the pool's filesystem, if that filesystem is ext4 without a journal.
func (b *bench) settle(ctx context.Context) error {
	// Only creates in the pool are slowed: the data path, the scale part
	// and the tree delete (on filesystems of its own) do not wait.
	if b.cfg.settle <= 0 || b.cfg.poolFS != "host" || b.cfg.only == "datapath" || b.cfg.only == "scale" || b.cfg.only == "tree-delete" {
		return nil
	}
	m, err := mountOf(b.poolDir)
	if err != nil || m.FSType != "ext4" || hasJournal(m.Source) {
		return nil
	}
	data, err := os.ReadFile(lastRunFile)
	if err != nil {
		return nil // no earlier run recorded
	}
	ns, err := strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64)
	if err != nil {
		return nil
	}
	wait := time.Until(time.Unix(0, ns).Add(b.cfg.settle))
	if wait <= 0 {
		return nil
	}
	why := fmt.Sprintf("until %s after the last run ended: ext4 without a journal scans the inodes that run freed on every create meanwhile (settle.go)",
		b.cfg.settle.Round(time.Second))
	fmt.Fprintf(os.Stderr, "bench: waiting %s before measuring, %s; --settle 0 skips the wait\n", wait.Round(time.Second), why)
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(wait):
	}
	b.rep.note("waited %s before measuring, %s", wait.Round(time.Second), why)
	return nil
}

// recordRunEnd notes when this run finished, for the next run's settle.
func recordRunEnd() {
	_ = os.WriteFile(lastRunFile, []byte(strconv.FormatInt(time.Now().UnixNano(), 10)+"\n"), 0o644)
}
