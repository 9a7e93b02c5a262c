package faults

import (
	"bufio"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// metaRange is one tuple of a SnapshotMetadata answer.
type metaRange struct{ offset, length int64 }

func (r metaRange) end() int64 { return r.offset + r.length }

// describeRanges abbreviates a list of ranges for a failure message.
func describeRanges(rs []metaRange) string {
	switch len(rs) {
	case 0:
		return "none"
	case 1:
		return fmt.Sprintf("%+v", rs[0])
	}
	return fmt.Sprintf("%+v .. %+v", rs[0], rs[len(rs)-1])
}

// metaMessage is what the messages of both streams have in common.
type metaMessage interface {
	proto.Message
	GetVolumeCapacityBytes() int64
	GetBlockMetadata() []*csipb.BlockMetadata
}

// metaCall starts one of the two streams at starting_offset from, with
// max_results 1: as many messages as ranges.
type metaCall func(ctx context.Context, from int64) (func() (metaMessage, error), error)

// WaitForReady: after a restart the call waits for the new driver, as a
// sidecar's retry would, instead of failing on the connection being
// redialled.
func deltaCall(c csipb.SnapshotMetadataClient, base, target string) metaCall {
	return func(ctx context.Context, from int64) (func() (metaMessage, error), error) {
		s, err := c.GetMetadataDelta(ctx, &csipb.GetMetadataDeltaRequest{BaseSnapshotId: base, TargetSnapshotId: target,
			StartingOffset: from, MaxResults: 1}, grpc.WaitForReady(true))
		if err != nil {
			return nil, err
		}
		return func() (metaMessage, error) { return s.Recv() }, nil
	}
}

func allocatedCall(c csipb.SnapshotMetadataClient, snap string) metaCall {
	return func(ctx context.Context, from int64) (func() (metaMessage, error), error) {
		s, err := c.GetMetadataAllocated(ctx, &csipb.GetMetadataAllocatedRequest{SnapshotId: snap,
			StartingOffset: from, MaxResults: 1}, grpc.WaitForReady(true))
		if err != nil {
			return nil, err
		}
		return func() (metaMessage, error) { return s.Recv() }, nil
	}
}

// streamResult is what a caller read from a stream and how it ended (err
// nil: the stream's end, io.EOF).
type streamResult struct {
	ranges    []metaRange
	messages  int
	wireBytes int   // each message with gRPC's 5-byte prefix
	capacity  int64 // the one every message carried; -1 if they differ
	err       error
	began     time.Time
	ended     time.Time
}

// readStream reads a stream to its end; at, if not nil, runs once the
// nth message is in, before the next is asked for.
func readStream(call metaCall, from int64, n int, at func()) streamResult {
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	res := streamResult{capacity: -1, began: time.Now()}
	recv, err := call(ctx, from)
	for err == nil {
		var msg metaMessage
		if msg, err = recv(); err != nil {
			break
		}
		res.messages++
		res.wireBytes += 5 + proto.Size(msg)
		switch c := msg.GetVolumeCapacityBytes(); {
		case res.messages == 1:
			res.capacity = c
		case c != res.capacity:
			res.capacity = -1
		}
		for _, b := range msg.GetBlockMetadata() {
			res.ranges = append(res.ranges, metaRange{b.GetByteOffset(), b.GetSizeBytes()})
		}
		if res.messages == n && at != nil {
			at()
		}
	}
	res.ended = time.Now()
	if err != io.EOF {
		res.err = err
	}
	return res
}

// listPool describes every entry under dir: kind, mode, size, inode and
// modification time, and for the small files (records, the pool's
// identity) a digest of the contents. Images are too large to hash; an
// image written, replaced or truncated changes its size, inode or time.
func listPool(dir string) (map[string]string, error) {
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		var st unix.Stat_t
		if err := unix.Lstat(path, &st); err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		desc := fmt.Sprintf("mode %o size %d inode %d mtime %d.%09d", st.Mode, st.Size, st.Ino, st.Mtim.Sec, st.Mtim.Nsec)
		if d.Type().IsRegular() && st.Size <= 1<<20 {
			data, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			desc += fmt.Sprintf(" sha256 %x", sha256.Sum256(data))
		}
		out[rel] = desc
		return nil
	})
	return out, err
}

// diffPool lists what differs between two listPool answers.
func diffPool(before, after map[string]string) []string {
	var bad []string
	for name, was := range before {
		switch now, ok := after[name]; {
		case !ok:
			bad = append(bad, fmt.Sprintf("CHANGED pool entry %s is gone (was %s)", name, was))
		case now != was:
			bad = append(bad, fmt.Sprintf("CHANGED pool entry %s: %s, was %s", name, now, was))
		}
	}
	for name, now := range after {
		if _, ok := before[name]; !ok {
			bad = append(bad, fmt.Sprintf("LEAK pool entry %s appeared (%s)", name, now))
		}
	}
	return bad
}

// openUnder lists the descriptors any process holds on files under dir.
// The driver's are closed by its death; a helper it ran, or a process
// that inherited one, would keep an image open and the pool busy.
func openUnder(dir string) []string {
	var bad []string
	fds, _ := filepath.Glob("/proc/[0-9]*/fd/*")
	for _, fd := range fds {
		target, err := os.Readlink(fd)
		if err != nil || (target != dir && !strings.HasPrefix(target, dir+"/")) {
			continue
		}
		pidDir := filepath.Dir(filepath.Dir(fd))
		comm, _ := os.ReadFile(pidDir + "/comm")
		bad = append(bad, fmt.Sprintf("LEAK %s (%s) holds %s open", pidDir, strings.TrimSpace(string(comm)), target))
	}
	return bad
}

// locksUnder lists the locks (flock, POSIX, OFD; /proc/locks) held on
// files under dir: the pool's lock kept by anyone would make the next
// driver wait or skip its repair. A staged volume's loop device holds its
// fence lock on the image for as long as it is attached (loop.Options.Lock,
// "-1" for a holder): the images in fenced may have one.
func locksUnder(dir string, fenced ...string) []string {
	type key struct {
		major, minor uint32
		ino          uint64
	}
	files := map[key]string{}
	_ = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		var st unix.Stat_t
		if err == nil && unix.Lstat(path, &st) == nil {
			files[key{unix.Major(st.Dev), unix.Minor(st.Dev), st.Ino}] = path
		}
		return nil
	})
	f, err := os.Open("/proc/locks")
	if err != nil {
		return []string{fmt.Sprintf("read /proc/locks: %v", err)}
	}
	defer f.Close()
	var bad []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// "1: FLOCK  ADVISORY  WRITE 1234 fd:01:5678 0 EOF"; a waiter has
		// "->" after the number. The device is major:minor in hex.
		fields := strings.Fields(strings.Replace(sc.Text(), "->", "", 1))
		if len(fields) < 6 {
			continue
		}
		parts := strings.Split(fields[5], ":")
		if len(parts) != 3 {
			continue
		}
		major, err1 := strconv.ParseUint(parts[0], 16, 32)
		minor, err2 := strconv.ParseUint(parts[1], 16, 32)
		ino, err3 := strconv.ParseUint(parts[2], 10, 64)
		if err1 != nil || err2 != nil || err3 != nil {
			continue
		}
		if path, ok := files[key{uint32(major), uint32(minor), ino}]; ok && !slices.Contains(fenced, path) {
			bad = append(bad, fmt.Sprintf("LEAK lock on %s: %s", path, sc.Text()))
		}
	}
	return bad
}
