package csi

import (
	"context"
	"time"

	"k8s.io/klog/v2"

	"github.com/filevol/filevol/internal/inuse"
	"github.com/filevol/filevol/internal/volume"
)

// A node that went silent (power lost, link cut: its client alive in the
// cluster's eyes but not answering) makes the controller's read of the
// node's in-use record wait: the node wrote it, so on CephFS its client
// holds exclusive capabilities on it, and the MDS must revoke them before
// anyone else reads; it gives up on the client only after its
// session_timeout (60 s by default; measured: the force-detach of a
// cut-off node returned 62 s after the cut). A killed client's connection
// is reset and the same read answers at once. So where the attachment
// record names the node's client (noted by the node, read while it was
// alive: ControllerPublishVolume), the controller waits for the in-use
// record at most silentAfter; if it has not answered by then while the
// attachment record, a file of the controller's own that the node only
// reads, does, the node's client does not answer, and the controller
// fences the client the attachment names. When the pool itself is slow
// (the control read does not answer either) it waits for the record as
// before: a healthy node is never evicted for an MDS under load.
//
// The record's read that did not answer goes on in the background, a
// goroutine and its thread blocked in the read: the eviction that follows
// releases it (the MDS drops the client's capabilities); without
// credentials it lasts until the MDS gives up on the client. One per
// call, so at most one per retry of a force-detach in that time.

// silentAfter bounds the wait for a node's in-use record, and for the
// control read, before the node's client is taken for silent: an alive
// client gives up its capabilities in milliseconds (8 to 142 ms measured
// for such reads on the harness).
const silentAfter = 5 * time.Second

// inUseRead is one read of an in-use record.
type inUseRead struct {
	e   inuse.Entry
	ok  bool
	err error
}

// inBackground runs fn in a goroutine of its own and hands its answer on
// the channel returned, buffered: one nobody waits for any more is
// dropped when fn returns.
func inBackground[T any](fn func() T) <-chan T {
	ch := make(chan T, 1)
	go func() { ch <- fn() }()
	return ch
}

// inUseOf reads node's in-use record of volume id. With bounded (the
// attachment record names the node's client), silent reports that the
// node's client did not answer (see above) and e and ok say nothing.
func (s *ControllerService) inUseOf(ctx context.Context, st *poolStore, id, node string, bounded bool) (e inuse.Entry, ok, silent bool, err error) {
	read := inBackground(func() inUseRead { e, ok, err := st.inuse.Get(id, node); return inUseRead{e, ok, err} })
	if bounded {
		begin := time.Now()
		if r, answered, err := within(ctx, read, s.silentWait()); answered || err != nil {
			return r.e, r.ok, false, firstErr(err, r.err)
		}
		if _, answered, err := within(ctx, inBackground(func() error { _, err := st.attach.Of(id); return err }), s.silentWait()); err != nil {
			return inuse.Entry{}, false, false, err
		} else if answered {
			klog.InfoS("node's in-use record did not answer while the pool did: its client does not answer; fencing the client its attachment names",
				"volumeID", id, "node", node, "waited", time.Since(begin).Round(time.Millisecond))
			return inuse.Entry{}, false, true, nil
		}
		klog.InfoS("the pool answers slowly: waiting for the node's in-use record", "volumeID", id, "node", node)
	}
	r, _, err := within(ctx, read, -1)
	return r.e, r.ok, false, firstErr(err, r.err)
}

// within waits for ch's answer at most d (d < 0: as long as ctx lasts);
// answered false when none came in time, err ctx's when it ended first.
func within[T any](ctx context.Context, ch <-chan T, d time.Duration) (v T, answered bool, err error) {
	var timeout <-chan time.Time
	if d >= 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		timeout = t.C
	}
	select {
	case v = <-ch:
		return v, true, nil
	case <-timeout:
		return v, false, nil
	case <-ctx.Done():
		return v, false, ctx.Err()
	}
}

func firstErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// silentWait is silentAfter, or the shorter wait a test sets.
func (s *ControllerService) silentWait() time.Duration {
	if s.silentAfter > 0 {
		return s.silentAfter
	}
	return silentAfter
}

// nodeClienter is a kind whose nodes note their client of the pool's
// filesystem in the pool (the image kind: poolowner.NoteClient).
type nodeClienter interface {
	NodeClient(node string) (volume.StorageClient, bool, error)
}

// notedClient is node's client as the node noted it in the pool, for its
// attachment record; nil where the kind fences no client or the node
// noted none. Read while the node is alive (it is being attached). A
// failure is logged: the attachment goes without, and a silent node is
// then fenced once its in-use record answers, as before.
func (s *ControllerService) notedClient(st *poolStore, node string) *inuse.Client {
	n, ok := st.VolumeStore.(nodeClienter)
	if _, fences := st.VolumeStore.(clientFencer); !ok || !fences {
		return nil
	}
	c, ok, err := n.NodeClient(node)
	if err != nil {
		klog.ErrorS(err, "read the client a node noted, for its attachment; attached without", "node", node)
	}
	if err != nil || !ok {
		return nil
	}
	return &inuse.Client{Kind: c.Kind, ID: c.ID, Cluster: c.Cluster}
}
