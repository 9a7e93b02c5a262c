package main

import (
	"context"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
)

const (
	gib = int64(1) << 30
	// callTimeout bounds one RPC; kubelet's and the sidecars' are similar.
	callTimeout = 2 * time.Minute
	// warmup calls are made and discarded before timing: the first calls
	// pay for the connection, lazily built gRPC state and cold caches.
	warmup = 20
)

// capability is the issue's: an ext4 mount volume, SINGLE_NODE_WRITER.
var capability = &csipb.VolumeCapability{
	AccessType: &csipb.VolumeCapability_Mount{Mount: &csipb.VolumeCapability_MountVolume{FsType: "ext4"}},
	AccessMode: &csipb.VolumeCapability_AccessMode{Mode: csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
}

func createRequest(name string) *csipb.CreateVolumeRequest {
	return &csipb.CreateVolumeRequest{
		Name:               name,
		CapacityRange:      &csipb.CapacityRange{RequiredBytes: gib},
		VolumeCapabilities: []*csipb.VolumeCapability{capability},
	}
}

func create(ctx context.Context, c csipb.ControllerClient, name string) (string, error) {
	return createFrom(ctx, c, createRequest(name))
}

// createFrom sends req, under callTimeout, and returns the new volume's ID.
func createFrom(ctx context.Context, c csipb.ControllerClient, req *csipb.CreateVolumeRequest) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	resp, err := c.CreateVolume(ctx, req)
	if err != nil {
		return "", fmt.Errorf("CreateVolume %s: %w", req.GetName(), err)
	}
	return resp.GetVolume().GetVolumeId(), nil
}

func deleteVolume(ctx context.Context, c csipb.ControllerClient, id string) error {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	if _, err := c.DeleteVolume(ctx, &csipb.DeleteVolumeRequest{VolumeId: id}); err != nil {
		return fmt.Errorf("DeleteVolume %s: %w", id, err)
	}
	return nil
}

// serialCreate is target 1: one client, one CreateVolume at a time. The
// driver answers only once image, record and directory are fsynced, so
// each sample includes making the volume durable. The volumes stay until
// throughput has measured too: see deleteCreated.
func (b *bench) serialCreate(ctx context.Context) error {
	c := b.d.ctrl
	for i := range warmup {
		id, err := create(ctx, c, fmt.Sprintf("warm-%d", i))
		if err != nil {
			return err
		}
		b.serialIDs = append(b.serialIDs, id)
	}
	lats := make([]time.Duration, 0, b.cfg.iterations)
	ids := make([]string, 0, b.cfg.iterations)
	s0 := b.schedSnap()
	for i := range b.cfg.iterations {
		t := time.Now()
		id, err := create(ctx, c, fmt.Sprintf("serial-%06d", i))
		lats = append(lats, time.Since(t))
		if err != nil {
			return err
		}
		ids = append(ids, id)
	}
	b.costPerCall("CreateVolume, serial", len(ids), s0)
	s := summarize(lats)
	b.rep.target("1", "CreateVolume 1 GiB, serial, p50", ms(s.p50), "≤ 1 ms", s.p50 <= time.Millisecond)
	b.rep.info("1", "CreateVolume 1 GiB, serial, p90 / p99", ms(s.p90)+" / "+ms(s.p99))
	b.rep.detail("CreateVolume, serial", "%s, mean %s", s, ms(s.mean))
	if b.seqP50 > 0 {
		b.rep.note("CreateVolume p50 %s: the pool's create syscalls alone take %s (%.0f%%) on this disk without gRPC (Pool disk rows); the rest is the RPC path, which tmpfs (--pool-fs tmpfs) isolates.",
			ms(s.p50), ms(b.seqP50), 100*float64(b.seqP50)/float64(s.p50))
	}
	b.rep.detail("Records on disk when CreateVolume returned", "%d of %d", b.recordsOnDisk(ids), len(ids))
	b.serialIDs = append(b.serialIDs, ids...)
	return nil
}

// deleteCreated deletes what serialCreate and throughput made, serially
// and then concurrently. It runs after both measured creates because on
// ext4 without a journal every inode freed makes the allocations of the
// next minutes slower (the kernel skips recently deleted inodes), and
// the harness should not slow down its own next phase.
func (b *bench) deleteCreated(ctx context.Context) error {
	lats := make([]time.Duration, 0, len(b.serialIDs))
	for _, id := range b.serialIDs {
		t := time.Now()
		if err := deleteVolume(ctx, b.d.ctrl, id); err != nil {
			return err
		}
		lats = append(lats, time.Since(t))
	}
	b.rep.detail("DeleteVolume, serial", "%s", summarize(lats))
	cs, closeAll, err := b.clients(b.cfg.clients)
	if err != nil {
		return err
	}
	defer closeAll()
	ids := b.tpIDs
	wall, lats, err := parallel(ctx, cs, len(ids), func(ctx context.Context, c csipb.ControllerClient, i int) error {
		return deleteVolume(ctx, c, ids[i])
	})
	if err != nil {
		return err
	}
	b.rep.detail(fmt.Sprintf("DeleteVolume throughput, %d clients", len(cs)), "%.0f deletes/s; %s", rate(len(ids), wall), summarize(lats))
	b.serialIDs, b.tpIDs = nil, nil
	return nil
}

// recordsOnDisk counts the ids with a <id>.json anywhere in the pool: a
// sanity check that a returned create left a record on disk, that does not
// depend on the pool's directory layout.
func (b *bench) recordsOnDisk(ids []string) int {
	have := map[string]bool{}
	_ = filepath.WalkDir(b.poolDir, func(p string, e fs.DirEntry, err error) error {
		if err == nil && e.Type().IsRegular() && strings.HasSuffix(p, ".json") {
			have[strings.TrimSuffix(e.Name(), ".json")] = true
		}
		return nil
	})
	n := 0
	for _, id := range ids {
		if have[id] {
			n++
		}
	}
	return n
}

// parallel runs op for i in [0, n) on the given clients, one goroutine per
// client, each taking the next i: a slow call delays only its own client,
// as with independent COs. It returns the wall time and every call's latency.
func parallel(ctx context.Context, clients []csipb.ControllerClient, n int,
	op func(ctx context.Context, c csipb.ControllerClient, i int) error) (time.Duration, []time.Duration, error) {
	var (
		next     atomic.Int64
		wg       sync.WaitGroup
		mu       sync.Mutex
		lats     = make([]time.Duration, 0, n)
		firstErr error
	)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	start := time.Now()
	for _, c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			local := make([]time.Duration, 0, n/len(clients)+1)
			for {
				i := int(next.Add(1)) - 1
				if i >= n || ctx.Err() != nil {
					break
				}
				t := time.Now()
				if err := op(ctx, c, i); err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
					cancel()
					break
				}
				local = append(local, time.Since(t))
			}
			mu.Lock()
			lats = append(lats, local...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	return time.Since(start), lats, firstErr
}

// clients opens n connections, one per client: the stricter shape for the
// driver, since n connections get none of the batching of n streams
// multiplexed on one HTTP/2 connection. (external-provisioner itself
// shares one connection among its workers: sharedConnection measures that.)
func (b *bench) clients(n int) ([]csipb.ControllerClient, func(), error) {
	return clientsOf(b.socket, n)
}

// clientsOf opens n connections to the driver on socket, one per client.
func clientsOf(socket string, n int) ([]csipb.ControllerClient, func(), error) {
	var out []csipb.ControllerClient
	var closers []func()
	closeAll := func() {
		for _, c := range closers {
			c()
		}
	}
	for range n {
		conn, err := dial(socket)
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		closers = append(closers, func() { conn.Close() })
		out = append(out, csipb.NewControllerClient(conn))
	}
	return out, closeAll, nil
}

// createMany creates n volumes named prefix-%06d on the clients.
func createMany(ctx context.Context, clients []csipb.ControllerClient, prefix string, n int) ([]string, time.Duration, []time.Duration, error) {
	ids := make([]string, n)
	wall, lats, err := parallel(ctx, clients, n, func(ctx context.Context, c csipb.ControllerClient, i int) error {
		id, err := create(ctx, c, fmt.Sprintf("%s-%06d", prefix, i))
		ids[i] = id
		return err
	})
	return ids, wall, lats, err
}

// throughput is target 2: cfg.clients clients creating cfg.concurrent
// volumes together, as fast as the driver answers.
func (b *bench) throughput(ctx context.Context) error {
	cs, closeAll, err := b.clients(b.cfg.clients)
	if err != nil {
		return err
	}
	defer closeAll()
	n, wall, lats, err := b.timedCreates(ctx, cs, "tp", fmt.Sprintf("CreateVolume, %d clients", len(cs)))
	if err != nil {
		return err
	}
	r := rate(n, wall)
	b.rep.target("2", fmt.Sprintf("CreateVolume throughput, %d clients", len(cs)), fmt.Sprintf("%.0f creates/s", r), "≥ 3,000 creates/s", r >= 3000)
	b.rep.detail(fmt.Sprintf("CreateVolume latency under %d clients", len(cs)), "%s; %d creates in %s", summarize(lats), n, ms(wall))
	return b.sharedConnection(ctx)
}

// sharedConnection measures what external-provisioner's workers do: n
// callers at once on ONE connection (its --worker-threads share the
// connection it opened to the driver). Reported beside target 2, which
// keeps the stricter n connections. It runs second, on a pool that already
// holds the first run's volumes.
func (b *bench) sharedConnection(ctx context.Context) error {
	conn, err := dial(b.socket)
	if err != nil {
		return err
	}
	defer conn.Close()
	cs := slices.Repeat([]csipb.ControllerClient{csipb.NewControllerClient(conn)}, b.cfg.clients)
	what := fmt.Sprintf("CreateVolume, %d callers on one connection", len(cs))
	n, wall, lats, err := b.timedCreates(ctx, cs, "tp1", what)
	if err != nil {
		return err
	}
	b.rep.detail(what+" (as external-provisioner calls)", "%.0f creates/s; %s", rate(n, wall), summarize(lats))
	return nil
}

// timedCreates connects every client (a GetCapacity each, before the clock
// starts), then creates cfg.concurrent volumes named prefix-%06d on them,
// reports their cost per call as what, and keeps their IDs for
// deleteCreated. It returns how many were created, the wall time and each
// call's latency.
func (b *bench) timedCreates(ctx context.Context, cs []csipb.ControllerClient, prefix, what string) (int, time.Duration, []time.Duration, error) {
	if _, _, err := parallel(ctx, cs, len(cs), func(ctx context.Context, c csipb.ControllerClient, _ int) error {
		_, err := c.GetCapacity(ctx, &csipb.GetCapacityRequest{})
		return err
	}); err != nil {
		return 0, 0, nil, err
	}
	s0 := b.schedSnap()
	ids, wall, lats, err := createMany(ctx, cs, prefix, b.cfg.concurrent)
	if err != nil {
		return 0, 0, nil, err
	}
	b.costPerCall(what, len(ids), s0)
	b.tpIDs = append(b.tpIDs, ids...)
	return len(ids), wall, lats, nil
}
