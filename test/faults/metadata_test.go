package faults

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/filevol/filevol/internal/testutil"
	"github.com/filevol/filevol/test/driver"
)

// The SnapshotMetadata service under SIGKILL. A backup tool reads a
// snapshot's allocated ranges or the delta between two snapshots as a
// stream of many messages; the driver dying in the middle must cost the
// caller no more than a retry: the stream ends with an error (never a
// silent short answer that a backup would take for the whole), nothing is
// left on the node (the calls only read: no file, device, mount, lock or
// open descriptor may outlive the process, and the pool must be byte for
// byte what it was), and the restarted driver gives the same ranges,
// whole or resumed from where the broken stream stopped.

const (
	// metaBlock is the unit the volume is written in: a filesystem block
	// of the pool, so that each block written is an extent of its own.
	metaBlock = 4096
	// metaData is how many blocks the first snapshot holds, one every
	// other block, holes between: as many ranges. The second snapshot
	// rewrites fifteen in sixteen of them, so its delta has 9,600 ranges.
	// Each is a message of 22 bytes on the wire.
	metaData = 10240
	// metaWindow is the flow-control window of the harness's metadata
	// connection. Once the caller has read the first message and stops,
	// the driver can have sent at most that window and queued at most its
	// per-stream write quota (64 KiB in grpc-go) and one message more;
	// then its Send blocks. A stream of minStreamBytes, half as much
	// again, cannot have been sent whole when the kill comes, however
	// slowly the caller runs. The reference streams are checked against it.
	metaWindow     = 64 << 10
	minStreamBytes = 3 * metaWindow
)

// metaKillAfter are the messages after which a stream's driver is
// killed: the first in the short run of make test; in a long run (make
// faults) also later ones, where the ext4 pool's comparison is further
// into the images and the resumed stream starts further on. All are far
// inside minStreamBytes' margin.
func metaKillAfter() []int {
	if *iterationsFlag > 0 || os.Getenv("FAULTS_ITERATIONS") != "" {
		return []int{1, 32, 512}
	}
	return []int{1}
}

// TestKillDuringSnapshotMetadata: on a reflink pool (xfs: the delta from
// the extent maps) and a copying one (ext4: the delta from the data), a
// block volume's two snapshots are described by GetMetadataDelta and
// GetMetadataAllocated with max_results 1; each stream is interrupted by
// SIGKILL right after its first message (metaKillAfter).
func TestKillDuringSnapshotMetadata(t *testing.T) {
	testutil.RequireRoot(t)
	bin := buildDriver(t)
	for _, fsType := range []string{"xfs", "ext4"} {
		t.Run(fsType, func(t *testing.T) { metaKillOn(t, bin, fsType) })
	}
}

type metaRun struct {
	t  *testing.T
	p  *proc
	o  *ops
	mc csipb.SnapshotMetadataClient
	v  *volume
	s  state
}

func metaKillOn(t *testing.T, bin, fsType string) {
	began := time.Now()
	scratch := testutil.Scratch(t, "faults")
	// The pool filesystem's loop file lives in memory: on this disk,
	// writing the volume's scattered blocks through two loop devices and
	// then discarding them when the file is removed took tens of seconds.
	mem := filepath.Join(scratch, "mem")
	if err := os.Mkdir(mem, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", mem, "tmpfs", 0, "size=512m,mode=0700"); err != nil {
		t.Fatal(err)
	}
	pool := driver.PoolFilesystem(t, mem, fsType, 512<<20)
	// The driver's directory beside the pool filesystem, not around it:
	// the invariants count every mount under it as the driver's.
	p := newProc(t, bin, filepath.Join(scratch, "driver"))
	p.pool = pool
	if err := p.start(); err != nil {
		t.Fatal(err)
	}
	m := &metaRun{t: t, p: p, o: &ops{p: p, st: newStats()}, mc: metaClient(t, p.sock)}
	m.v = newVolume(p.dir, "cbt-"+fsType, "block")
	m.v.size = 2 * metaData * metaBlock
	m.must(m.o.create(m.v, nil))
	m.must(m.o.stageAndPublish(m.v))
	// The volume stays published throughout, as a pod's volume is while
	// it is backed up.
	m.s = state{volumes: map[string]*volume{m.v.id: m.v}, published: map[string]*volume{m.v.id: m.v}}

	var all, rewritten []int64
	for i := range int64(metaData) {
		all = append(all, 2*i)
		if i%16 != 0 {
			rewritten = append(rewritten, 2*i)
		}
	}
	m.must(writeBlocks(m.v.dataPath(), all, 1))
	base := m.snapshot("1")
	m.must(writeBlocks(m.v.dataPath(), rewritten, 2))
	target := m.snapshot("2")
	setup := time.Since(began)

	calls := []struct {
		name string
		call metaCall
		want []int64 // the blocks the answer must be
	}{
		{"GetMetadataDelta", deltaCall(m.mc, base, target), rewritten},
		{"GetMetadataAllocated", allocatedCall(m.mc, target), all},
	}
	for _, c := range calls {
		ref := readStream(c.call, 0, 0, nil)
		if ref.err != nil {
			t.Fatalf("%s before any kill: %v", c.name, ref.err)
		}
		m.checkReference(c.name, ref, c.want)
		for _, n := range metaKillAfter() {
			m.interrupt(c.name, c.call, ref, n)
		}
	}

	m.must(m.o.unpublishAndUnstage(m.v))
	m.must(m.o.deleteSnapshot(&snapshot{name: "base", id: base}))
	m.must(m.o.deleteSnapshot(&snapshot{name: "target", id: target}))
	m.must(m.o.delete(m.v))
	for _, b := range checkInvariants(context.Background(), p, features{snapshot: true}, state{volumes: map[string]*volume{}}) {
		t.Errorf("at the end: %s", b)
	}
	t.Logf("%s pool: set-up %s, all %s", fsType, setup.Round(time.Millisecond), time.Since(began).Round(time.Millisecond))
}

func (m *metaRun) must(err error) {
	m.t.Helper()
	if err != nil {
		m.t.Fatal(err)
	}
}

// snapshot snapshots the volume under a name of its own (takeSnapshot
// names a snapshot after its volume) and returns its ID.
func (m *metaRun) snapshot(suffix string) string {
	m.t.Helper()
	alias := &volume{name: m.v.name + "-" + suffix, id: m.v.id, kind: m.v.kind, size: m.v.size}
	m.must(m.o.takeSnapshot(alias))
	return alias.snap.id
}

// checkReference checks an uninterrupted answer: exactly the blocks the
// test wrote (the pattern leaves no room for a block rewritten with the
// same bytes, or for a neighbour merged in), the volume's capacity in
// every message, and long enough that the kill lands mid-stream.
func (m *metaRun) checkReference(name string, ref streamResult, blocks []int64) {
	m.t.Helper()
	want := make([]metaRange, len(blocks))
	for i, b := range blocks {
		want[i] = metaRange{b * metaBlock, metaBlock}
	}
	if !slices.Equal(ref.ranges, want) {
		m.t.Errorf("%s: %d ranges (%s), want the %d blocks written (%s)", name, len(ref.ranges), describeRanges(ref.ranges), len(want), describeRanges(want))
	}
	if ref.capacity != m.v.size {
		m.t.Errorf("%s: capacity %d in a message, want %d", name, ref.capacity, m.v.size)
	}
	if ref.wireBytes < minStreamBytes {
		m.t.Fatalf("%s: the stream is %d bytes, under %d: it could be sent whole before the kill, and the test would prove nothing", name, ref.wireBytes, minStreamBytes)
	}
	m.t.Logf("%s: %d messages, %d bytes on the wire, in %s", name, ref.messages, ref.wireBytes, ref.ended.Sub(ref.began).Round(time.Millisecond))
}

// interrupt runs call, SIGKILLs the driver once the nth message is in,
// and checks what the caller saw, what the node holds while no driver
// runs, and what the restarted driver answers.
func (m *metaRun) interrupt(call string, stream metaCall, ref streamResult, n int) {
	t, p := m.t, m.p
	name := fmt.Sprintf("%s killed after message %d", call, n)
	before, err := listPool(p.pool)
	m.must(err)
	var killedAt time.Time
	got := readStream(stream, 0, n, func() { p.kill(); killedAt = time.Now() })

	// The caller: an error it can retry on, after a prefix of the answer.
	if c := status.Code(got.err); c != codes.Unavailable {
		t.Errorf("%s: the stream ended with %v (code %s), want UNAVAILABLE: a caller must see the answer is incomplete", name, got.err, c)
	}
	if got.messages < n || len(got.ranges) >= len(ref.ranges) {
		t.Fatalf("%s: %d of %d ranges in %d messages before the stream ended: the kill did not land mid-stream", name, len(got.ranges), len(ref.ranges), got.messages)
	}
	if !slices.Equal(got.ranges, ref.ranges[:len(got.ranges)]) {
		t.Errorf("%s: the %d ranges before the kill are not the answer's first ones", name, len(got.ranges))
	}
	t.Logf("%s: %d of %d ranges before the stream failed (%v); the error came %s after the kill", name, len(got.ranges), len(ref.ranges),
		status.Code(got.err), got.ended.Sub(killedAt).Round(time.Microsecond))

	// The node with no driver, before a new one repairs anything.
	var bad []string
	bad = append(bad, checkAtRest(p, m.s)...)
	bad = append(bad, openUnder(p.pool)...)
	bad = append(bad, locksUnder(p.pool, filepath.Join(p.pool, "volumes", m.v.id+".img"))...)
	after, err := listPool(p.pool)
	m.must(err)
	bad = append(bad, diffPool(before, after)...)
	for _, b := range bad {
		t.Errorf("%s; no driver running: %s", name, b)
	}

	// The restarted driver: the same answer, whole or resumed.
	m.must(p.start())
	whole := readStream(stream, 0, 0, nil)
	if whole.err != nil || !slices.Equal(whole.ranges, ref.ranges) {
		t.Errorf("%s; restarted, the whole answer: %d ranges (%s), err %v; before the kill %d (%s)", name, len(whole.ranges), describeRanges(whole.ranges), whole.err, len(ref.ranges), describeRanges(ref.ranges))
	}
	from := got.ranges[len(got.ranges)-1].end()
	rest := readStream(stream, from, 0, nil)
	if tail := ref.ranges[len(got.ranges):]; rest.err != nil || !slices.Equal(rest.ranges, tail) {
		t.Errorf("%s; restarted, resumed at starting_offset %d: %d ranges (%s), err %v; want the %d left (%s)", name, from, len(rest.ranges), describeRanges(rest.ranges), rest.err, len(tail), describeRanges(tail))
	}
	for _, b := range checkInvariants(context.Background(), p, features{}, m.s) {
		t.Errorf("%s; restarted: %s", name, b)
	}
}

// metaClient is a connection for the metadata streams with a fixed
// flow-control window: grpc-go otherwise grows a window to the
// bandwidth-delay product it measures, and a stream could then be sent
// whole before the kill however long it is. It redials as quickly as
// newProc's connection after a restart.
func metaClient(t *testing.T, sock string) csipb.SnapshotMetadataClient {
	conn, err := grpc.NewClient("unix://"+sock,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithStaticStreamWindowSize(metaWindow), grpc.WithStaticConnWindowSize(metaWindow),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 10 * time.Millisecond, Multiplier: 1.5, Jitter: 0.2, MaxDelay: 100 * time.Millisecond},
			MinConnectTimeout: time.Second,
		}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return csipb.NewSnapshotMetadataClient(conn)
}

// writeBlocks writes a 4 KiB pattern block to each block of the device
// at path and fsyncs it.
func writeBlocks(path string, blocks []int64, key uint64) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	data := pattern(key, len(blocks)*metaBlock)
	for i, b := range blocks {
		if _, err := f.WriteAt(data[i*metaBlock:(i+1)*metaBlock], b*metaBlock); err != nil {
			return fmt.Errorf("write block %d of %s: %w", b, path, err)
		}
	}
	return f.Sync()
}
