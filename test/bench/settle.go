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
// will not reuse an inode freed in the last minute, five while its inode
// table block is dirty, and finds that out by looking at each freed inode
// of the block group on every allocation. A bench run frees some 12,000
// inodes when it cleans up, in the block group the next run's pool gets, so
// a run started within five minutes of the last one measures that scan
// (up to 1 ms of CPU per file the driver creates) rather than the driver:
// measured, CreateVolume p50 went from 1.2 to 2.7 ms run after run.
//
// So the harness notes when a run ended and, on such a filesystem, waits
// out the rest of the five minutes before it measures. The wait is in the
// report; --settle 0 skips it.
const recentlyFreedFor = 5*time.Minute + 10*time.Second

// lastRunFile holds the Unix time (ns) at which the last run finished.
const lastRunFile = benchRoot + ".last-run"

// settle waits until the last run's freed inodes no longer slow allocation
// on the pool's filesystem, if that filesystem is ext4 without a journal.
func (b *bench) settle(ctx context.Context) error {
	if b.cfg.settle <= 0 || b.cfg.poolFS != "host" {
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
	wait := time.Until(time.Unix(0, ns).Add(min(b.cfg.settle, recentlyFreedFor)))
	if wait <= 0 {
		return nil
	}
	msg := fmt.Sprintf("waited %s before measuring: the last run ended %s ago, and ext4 without a journal scans the inodes it freed on every create for five minutes (settle.go)",
		wait.Round(time.Second), time.Since(time.Unix(0, ns)).Round(time.Second))
	fmt.Fprintf(os.Stderr, "bench: %s; --settle 0 skips the wait\n", msg)
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(wait):
	}
	b.rep.note("%s", msg)
	return nil
}

// recordRunEnd notes when this run finished, for the next run's settle.
func recordRunEnd() {
	_ = os.WriteFile(lastRunFile, []byte(strconv.FormatInt(time.Now().UnixNano(), 10)+"\n"), 0o644)
}
