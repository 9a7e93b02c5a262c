package ceph

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"
)

// WaitForRoom returns once a client's statfs reports the room of the
// data pool, which it does only after the OSD's statistics have gone
// through the mgr to the monitor: 5 s after the MDS was active on a quiet
// machine, 16-33 s at a load average of 9-17 (make test). Until then
// a client's statfs says 0 bytes available, and a shared pool refuses
// every CreateVolume (RESOURCE_EXHAUSTED, "0 available": test/faults'
// CephFS kill test, whose first create came a second after the start).
// A test that creates volumes calls it before its first create; the
// others need not wait, and tests that run first overlap the mgr's start.
func (c *Cluster) WaitForRoom(t testing.TB) {
	t.Helper()
	if c.room.Load() {
		return
	}
	begin := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	if err := c.waitFor(ctx, "the data pool's room", c.roomKnown); err != nil {
		t.Fatalf("ceph: %v", err)
	}
	c.room.Store(true)
	t.Logf("ceph: the data pool's room known after %v more", time.Since(begin).Round(time.Millisecond))
}

// roomKnown reports whether the monitor knows the data pool's room (ceph
// df's max_avail, which a client's statfs reports).
func (c *Cluster) roomKnown() (bool, error) {
	out, err := c.cli(context.Background(), "df", "--format", "json")
	if err != nil {
		return false, nil
	}
	var d struct {
		Pools []struct {
			Name  string `json:"name"`
			Stats struct {
				MaxAvail int64 `json:"max_avail"`
			} `json:"stats"`
		} `json:"pools"`
	}
	if err := json.Unmarshal([]byte(out), &d); err != nil {
		return false, fmt.Errorf("df: %w", err)
	}
	for _, p := range d.Pools {
		if p.Name == DataPool {
			return p.Stats.MaxAvail > 0, nil
		}
	}
	return false, nil
}
