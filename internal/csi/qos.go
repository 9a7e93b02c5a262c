package csi

import (
	"context"
	"errors"
	"hash/fnv"
	"os"
	"slices"
	"sync"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"k8s.io/klog/v2"

	"github.com/filevol/filevol/internal/answer"
	"github.com/filevol/filevol/internal/hostos/cgroup"
	"github.com/filevol/filevol/internal/reading"
	"github.com/filevol/filevol/internal/volume"
	"github.com/filevol/filevol/internal/volview"
)

// How a volume's I/O limits reach a pod (qos_params.go has the
// parameters, controller_modify.go the change):
//
//   - at NodePublishVolume, once the volume is bound at the target, the
//     node writes the limits of the volume's record to the cgroup of the
//     pod that the target path names (kubelet's .../pods/<uid>/volumes/...
//     or .../volumeDevices/publish/<pv>/<uid>; the volume context's
//     csi.storage.k8s.io/pod.uid with podInfoOnMount), for every loop
//     device of the volume (major:minor): blkio.throttle.*_device on
//     cgroup v1, io.max on v2 (internal/hostos/cgroup);
//   - every Config.QoSResync (1 s by default) the node re-reads, from
//     disk, the record of every volume attached on it, finds every pod
//     that has it published (its targets in the mount table) and makes
//     each pod's throttling say what the record says. A ControllerModify
//     Volume thus reaches a running pod within one period plus the time
//     of a pass (milliseconds), with no restart and without the
//     controller and the node sharing anything but the pool: it works
//     the same with --mode all and with split controller and node.
//
// Limits never fail a publish: a pod without its volume is worse than a
// pod without its limits, and the reconcile retries every period. A pod
// whose cgroup cannot be found (a kubelet cgroup layout filevol does not
// know, a hierarchy not mounted in its container) is logged, once per
// change, and reported as an abnormal volume condition by
// NodeGetVolumeHealth until the limits are applied.

// qosEnforcer writes volumes' limits into the pods' cgroups.
type qosEnforcer struct {
	hier []cgroup.Hierarchy
	// devNum names a loop device as the throttling files do (major:minor).
	devNum func(path string) (string, error)
	mu     sync.Mutex
	// problems: why a volume's limits are not enforced, by volume ID.
	problems map[string]string
	// pods caches where each pod's cgroup was found, by hierarchy root and
	// UID, so that a reconcile pass walks no tree for a pod it knows; an
	// entry whose directory is gone (the pod ended) is looked up again.
	pods map[[2]string]string
	// stripes serialise, per volume, an apply (which reads who uses the
	// volume, then writes) with an unpublish (which clears the pod's rule,
	// then unbinds), so that a reconcile pass never puts back the rule of
	// a pod whose publish just ended. Not the service's try-locks: a pass
	// must not make kubelet's calls ABORTED; it only delays them by the
	// milliseconds of one apply.
	stripes [64]sync.Mutex
}

// lockVolume takes the volume's stripe.
func (e *qosEnforcer) lockVolume(id string) func() {
	h := fnv.New32a()
	h.Write([]byte(id))
	m := &e.stripes[h.Sum32()%uint32(len(e.stripes))]
	m.Lock()
	return m.Unlock
}

// findPod is h.FindPod through the cache.
func (e *qosEnforcer) findPod(h cgroup.Hierarchy, uid string) (string, error) {
	k := [2]string{h.Root, uid}
	e.mu.Lock()
	dir, ok := e.pods[k]
	e.mu.Unlock()
	if ok {
		if _, err := os.Stat(dir); err == nil {
			return dir, nil
		}
	}
	dir, err := h.FindPod(uid)
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.pods == nil {
		e.pods = map[[2]string]string{}
	}
	if err != nil {
		delete(e.pods, k)
		return "", err
	}
	e.pods[k] = dir
	return dir, nil
}

// newQoSEnforcer returns an enforcer for the hierarchies among roots that
// can throttle; nil (limits are kept but not enforced) when there is none.
func newQoSEnforcer(roots []string) *qosEnforcer {
	h := cgroup.Detect(roots)
	if len(h) == 0 {
		if len(roots) > 0 {
			klog.InfoS("No cgroup hierarchy that throttles block I/O; volume I/O limits will not be enforced on this node", "searched", roots)
		}
		return nil
	}
	klog.InfoS("Volume I/O limits enforced through cgroups", "hierarchies", h)
	return &qosEnforcer{hier: h, devNum: cgroup.DeviceNumber, problems: map[string]string{}}
}

// ioUsers is what a backend tells the enforcer of a volume of its kind:
// the block devices through which pods do its I/O, and the UIDs of the
// pods that have it published on this node.
type ioUsers interface {
	// IOUsers answers from the reading ctx carries, if any (reading.With);
	// given paths, from what is mounted there alone (a publish's target:
	// its pod is the one to limit now, the reconcile brings the others).
	IOUsers(ctx context.Context, id string, at ...string) (devices []string, pods []string, err error)
}

// apply makes the throttling of every pod using vol say vol's limits;
// extraPod is a pod known otherwise (podInfoOnMount), "" if none. It
// returns why it could not, for the log and the health condition.
func (e *qosEnforcer) apply(ctx context.Context, b ioUsers, vol volume.Volume, extraPod string, at ...string) error {
	defer e.lockVolume(vol.ID)()
	devs, pods, err := b.IOUsers(ctx, vol.ID, at...)
	if err != nil {
		return e.note(vol.ID, err)
	}
	if extraPod != "" && !slices.Contains(pods, extraPod) {
		pods = append(pods, extraPod)
	}
	q := vol.Limits()
	l := cgroup.Limits{ReadIOPS: uint64(q.ReadIOPS), WriteIOPS: uint64(q.WriteIOPS),
		ReadBPS: uint64(q.ReadBytesPerSecond), WriteBPS: uint64(q.WriteBytesPerSecond)}
	var errs []error
	for _, pod := range pods {
		for _, h := range e.hier {
			dir, err := e.findPod(h, pod)
			if errors.Is(err, cgroup.ErrPodNotFound) && q.IsZero() {
				continue // nothing to enforce, nothing to report
			}
			if err != nil {
				errs = append(errs, err)
				continue
			}
			for _, d := range devs {
				num, err := e.devNum(d)
				if err != nil {
					errs = append(errs, err)
					continue
				}
				changed, err := h.Apply(dir, num, l)
				if err != nil {
					errs = append(errs, err)
				} else if changed {
					klog.InfoS("volume I/O limits applied", "volumeID", vol.ID, "pod", pod, "device", num, "cgroup", dir, "limits", q)
				}
			}
		}
	}
	return e.note(vol.ID, errors.Join(errs...))
}

// note records the outcome of an apply for Health, logging a new problem
// once rather than every period.
func (e *qosEnforcer) note(id string, err error) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if err == nil {
		delete(e.problems, id)
		return nil
	}
	msg := "I/O limits not enforced: " + err.Error()
	if e.problems[id] != msg {
		klog.ErrorS(err, "Volume I/O limits not enforced; retrying every resync period", "volumeID", id)
	}
	e.problems[id] = msg
	return err
}

// forgetExcept drops the problems of volumes no longer attached here: no
// pod on this node uses them, so nothing of theirs goes unenforced.
func (e *qosEnforcer) forgetExcept(attached map[string]bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for id := range e.problems {
		if !attached[id] {
			delete(e.problems, id)
		}
	}
}

// problem is why vol's limits are not enforced ("" when they are).
func (e *qosEnforcer) problem(id string) string {
	if e == nil {
		return ""
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.problems[id]
}

// unpublishing runs unpublish, the backend's, once the volume's
// throttling is removed from the pod that the target names: the rule
// names a loop device that may next serve another volume. Removing it is
// best effort, as applying is; a pod that is gone took its cgroup and its
// rules with it.
func (s *NodeService) unpublishing(nv *nodeVolumes, id, target string, unpublish func() error) error {
	if s.qos == nil {
		return unpublish()
	}
	defer s.qos.lockVolume(id)()
	s.clearPod(nv, id, target)
	return unpublish()
}

func (s *NodeService) clearPod(nv *nodeVolumes, id, target string) {
	b, ok := nv.NodeBackend.(ioUsers)
	pod := volview.PodUID(target)
	if !ok || pod == "" {
		return
	}
	devs, _, err := b.IOUsers(context.Background(), id)
	if err != nil {
		return
	}
	for _, h := range s.qos.hier {
		dir, err := s.qos.findPod(h, pod)
		if err != nil {
			continue
		}
		for _, d := range devs {
			if num, err := s.qos.devNum(d); err == nil {
				if _, err := h.Apply(dir, num, cgroup.Limits{}); err != nil {
					klog.ErrorS(err, "Cannot remove a volume's I/O limits from its pod", "volumeID", id, "pod", pod)
				}
			}
		}
	}
}

// applyPublished is NodePublishVolume's part: never an error, see above.
func (s *NodeService) applyPublished(nv *nodeVolumes, vol volume.Volume, podUID, target string) {
	if b, ok := nv.NodeBackend.(ioUsers); ok && s.qos != nil {
		_ = s.qos.apply(context.Background(), b, vol, podUID, target)
	}
}

// RunQoS reconciles the volumes' limits every Config.QoSResync until ctx
// ends; it returns at once when limits are not enforced on this node.
func (s *NodeService) RunQoS(ctx context.Context) {
	if s.qos == nil {
		return
	}
	period := s.cfg.QoSResync
	if period <= 0 {
		period = time.Second
	}
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.ReconcileQoS()
		}
	}
}

// ReconcileQoS is one pass: every volume attached on this node gets the
// limits its record (read from disk) says, in every pod that uses it. It
// takes no volume's try-lock (kubelet's calls are never ABORTED by it),
// only the enforcer's stripe, as an unpublish does (unpublishing).
func (s *NodeService) ReconcileQoS() {
	if s.qos == nil {
		return
	}
	attached := map[string]bool{}
	defer s.qos.forgetExcept(attached)
	// One reading of the loop devices and the mount table for the whole
	// pass: a look-up of its own per volume made a pass over 1,000
	// volumes a million sysfs reads and 1,000 parses of the table, every
	// second, and took a CPU of two away from everything else.
	r, err := reading.Read(s.host)
	if err != nil {
		klog.ErrorS(err, "QoS reconcile: cannot read the kernel")
		return
	}
	ctx := reading.With(context.Background(), r)
	for _, nv := range s.vols.all {
		b, ok := nv.NodeBackend.(ioUsers)
		f, ok2 := nv.NodeBackend.(stagedFinder)
		if !ok || !ok2 {
			continue
		}
		ids, err := f.Attached()
		if err != nil {
			klog.ErrorS(err, "QoS reconcile: cannot list attached volumes")
			continue
		}
		for _, id := range ids {
			attached[id] = true
			s.reconcileVolume(ctx, nv, b, id)
		}
	}
}

func (s *NodeService) reconcileVolume(ctx context.Context, nv *nodeVolumes, b ioUsers, id string) {
	vol, err := nv.Get(id)
	if err != nil {
		return // deleted meanwhile, or not this node's to limit
	}
	_ = s.qos.apply(ctx, b, vol, "")
}

// qosHealth is the volume condition that says its limits are not enforced.
func (s *NodeService) qosHealth(id string) []*csipb.VolumeHealth_VolumeHealthEntry {
	msg := s.qos.problem(id)
	if msg == "" {
		return nil
	}
	return []*csipb.VolumeHealth_VolumeHealthEntry{answer.HealthEntry(csipb.VolumeHealthErrorType_DEGRADED, volume.ReasonLimitsNotEnforced, msg)}
}
