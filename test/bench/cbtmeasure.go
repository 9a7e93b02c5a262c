package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
)

// cbtCallTimeout bounds one SnapshotMetadata stream: the reference reads
// both snapshots whole, minutes at 64 GiB.
const cbtCallTimeout = 30 * time.Minute

// cbtCall is what one GetMetadataAllocated or GetMetadataDelta measured.
type cbtCall struct {
	took             time.Duration
	devRead          int64 // bytes the pool filesystem's device read meanwhile
	readBytes, rchar int64 // the driver's /proc/PID/io deltas
	reported         int64 // bytes in the ranges streamed
	ranges, messages int
}

// cbtMeasure times both calls on every side, cfg.cbtRounds rounds, the
// sides taking turns at going first, and reports them.
func (b *bench) cbtMeasure(ctx context.Context, fsType, label, poolDev, mnt string, sides []*cbtSide, changes []cbtChange) error {
	// res[side][0: delta, 1: allocated][round]
	res := make([][2][]cbtCall, len(sides))
	for round := range b.cfg.cbtRounds {
		for k := range sides {
			i := (k + round) % len(sides)
			s := sides[i]
			for kind := range 2 {
				c, err := cbtOneCall(ctx, s, kind == 0, poolDev, mnt)
				if err != nil {
					return fmt.Errorf("%s round %d: %w", s.name, round, err)
				}
				res[i][kind] = append(res[i][kind], c)
			}
		}
	}
	for i, s := range sides {
		// The peak includes both maps a delta holds at once (filevol)
		// or the read buffers (the reference).
		if m, err := s.d.memory(); err == nil {
			b.rep.detail(fmt.Sprintf("CBT %s, %s after the %s calls", fsType, s.name, label), "driver %s", m)
		}
		gib := float64(s.size) / float64(1<<30)
		for kind, name := range []string{"GetMetadataDelta", "GetMetadataAllocated"} {
			cs := res[i][kind]
			written := changes[i].bytes()
			if kind == 1 {
				written = s.work.nonZeroBytes()
			}
			times := make([]float64, len(cs))
			for j, c := range cs {
				times[j] = float64(c.took)
			}
			med, lo, hi := spread(times)
			dev, rb, rc := cbtMedian(cs, func(c cbtCall) int64 { return c.devRead }), cbtMedian(cs, func(c cbtCall) int64 { return c.readBytes }), cbtMedian(cs, func(c cbtCall) int64 { return c.rchar })
			last := cs[len(cs)-1]
			ratio := float64(last.reported) / float64(written)
			what := fmt.Sprintf("%s, %s pool, %s, %s of %d GiB changed", name, fsType, s.name, label, s.size>>30)
			b.rep.info("C", what+": time, median (min–max) of "+strconv.Itoa(len(cs)),
				fmt.Sprintf("%s (%s–%s), %s per GiB of volume", ms(time.Duration(med)), ms(time.Duration(lo)), ms(time.Duration(hi)), ms(time.Duration(med/gib))))
			b.rep.target("C", what+": image data read by the driver (rchar, median)", mib(rc), "0", rc < 1<<20)
			b.rep.info("C", what+": read from the pool's device / by the driver from storage (median, cold caches)", mib(dev)+" / "+mib(rb))
			if kind == 0 {
				b.rep.target("C", what+": reported ÷ written between the snapshots",
					fmt.Sprintf("%.3f (%s of %s; %s differ)", ratio, mib(last.reported), mib(written), mib(written-changes[i].same*cbtBlock)), "≤ 1.05", ratio <= 1.05)
			} else {
				b.rep.info("C", what+": reported ÷ non-zero bytes held", fmt.Sprintf("%.3f (%s of %s)", ratio, mib(last.reported), mib(written)))
			}
			b.rep.detail("CBT "+what, "%d ranges in %d messages; per round: %s", last.ranges, last.messages, cbtRounds(cs))
		}
	}
	return nil
}

// cbtOneCall drops the page cache, then reads one whole stream.
func cbtOneCall(ctx context.Context, s *cbtSide, delta bool, poolDev, mnt string) (cbtCall, error) {
	if err := syncFS(mnt); err != nil {
		return cbtCall{}, err
	}
	if err := os.WriteFile("/proc/sys/vm/drop_caches", []byte("3"), 0); err != nil {
		return cbtCall{}, fmt.Errorf("drop caches: %w", err)
	}
	pid := s.d.cmd.Process.Pid
	dev0, err := sectorsRead(poolDev)
	if err != nil {
		return cbtCall{}, err
	}
	rb0, rc0, err := procIO(pid)
	if err != nil {
		return cbtCall{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, cbtCallTimeout)
	defer cancel()
	var c cbtCall
	t := time.Now()
	var recv func() ([]*csipb.BlockMetadata, error)
	if delta {
		st, err := s.smd.GetMetadataDelta(ctx, &csipb.GetMetadataDeltaRequest{BaseSnapshotId: s.snaps[len(s.snaps)-2], TargetSnapshotId: s.snaps[len(s.snaps)-1]})
		if err != nil {
			return c, fmt.Errorf("GetMetadataDelta: %w", err)
		}
		recv = func() ([]*csipb.BlockMetadata, error) { r, err := st.Recv(); return r.GetBlockMetadata(), err }
	} else {
		st, err := s.smd.GetMetadataAllocated(ctx, &csipb.GetMetadataAllocatedRequest{SnapshotId: s.snaps[len(s.snaps)-1]})
		if err != nil {
			return c, fmt.Errorf("GetMetadataAllocated: %w", err)
		}
		recv = func() ([]*csipb.BlockMetadata, error) { r, err := st.Recv(); return r.GetBlockMetadata(), err }
	}
	for {
		bms, err := recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return c, fmt.Errorf("stream after %d messages: %w", c.messages, err)
		}
		c.messages++
		for _, bm := range bms {
			c.ranges++
			c.reported += bm.GetSizeBytes()
		}
	}
	c.took = time.Since(t)
	dev1, err := sectorsRead(poolDev)
	if err != nil {
		return c, err
	}
	rb1, rc1, err := procIO(pid)
	if err != nil {
		return c, err
	}
	c.devRead, c.readBytes, c.rchar = (dev1-dev0)*512, rb1-rb0, rc1-rc0
	return c, nil
}

// sectorsRead is field 3 of /sys/block/<dev>/stat: 512-byte sectors read.
func sectorsRead(dev string) (int64, error) {
	data, err := os.ReadFile("/sys/block/" + dev + "/stat")
	if err != nil {
		return 0, err
	}
	f := strings.Fields(string(data))
	if len(f) < 3 {
		return 0, fmt.Errorf("/sys/block/%s/stat: %q", dev, data)
	}
	return strconv.ParseInt(f[2], 10, 64)
}

// procIO returns read_bytes and rchar of /proc/<pid>/io.
func procIO(pid int) (readBytes, rchar int64, err error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/io", pid))
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, _ := strings.Cut(sc.Text(), ": ")
		n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		switch k {
		case "read_bytes":
			readBytes = n
		case "rchar":
			rchar = n
		}
	}
	return readBytes, rchar, sc.Err()
}

func cbtMedian(cs []cbtCall, f func(cbtCall) int64) int64 {
	xs := make([]float64, len(cs))
	for i, c := range cs {
		xs[i] = float64(f(c))
	}
	med, _, _ := spread(xs)
	return int64(med)
}

func cbtRounds(cs []cbtCall) string {
	parts := make([]string, len(cs))
	for i, c := range cs {
		parts[i] = fmt.Sprintf("%s, dev %s, rchar %s", ms(c.took), mib(c.devRead), mib(c.rchar))
	}
	return strings.Join(parts, "; ")
}

func mib(n int64) string {
	if n < 1<<20 {
		return fmt.Sprintf("%.1f KiB", float64(n)/1024)
	}
	return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
}
