//go:build e2e

package multinode

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// sharedBackend is one of the cluster's two shared pools, each a release of the chart
// with a driver of its own (run.sh): its classes, and where the stories read what reached
// its storage from a view of their own, never through a node.
type sharedBackend struct {
	name string
	// class: the driver's ext4 image class; dirClass: its directory class (ReadWriteMany).
	class, dirClass string
	// images holds the image pool's files (volumes/<handle>.img), dirs the directory
	// pool's, as the storage holds them.
	images, dirs string
	// victim: the node a story that kills one kills on this backend; the backends'
	// victims differ, so that such stories run on both at once (eachBackendAtOnce).
	victim string
	// release: the chart's release of the backend's driver; evicts: its controller
	// evicts a force-detached node's client (CephFS, given the cluster's credentials
	// in the controller-publish Secret: values-ceph.yaml).
	release string
	evicts  bool
}

// sharedBackends: GlusterFS over TLS (gluster.sh; values.yaml), its directory pool a
// btrfs every node mounts from one loop device; and CephFS (ceph.sh; values-ceph.yaml),
// image and directory pools in one CephFS, read through ceph.sh's reader client.
func sharedBackends(t *testing.T) []sharedBackend {
	t.Helper()
	env := func(k string) string {
		v := os.Getenv(k)
		if v == "" {
			t.Fatalf("%s is not set (run.sh sets it)", k)
		}
		return v
	}
	reader := env("FILEVOL_E2E_CEPH_READER")
	return []sharedBackend{
		{name: "gluster", class: classShared, dirClass: classDir,
			images: env("FILEVOL_E2E_GLUSTER_BRICK"), dirs: env("FILEVOL_E2E_DIR_POOL"), victim: "n3",
			release: "filevol"},
		{name: "ceph", class: "filevol-ceph", dirClass: "filevol-ceph-dir",
			images: filepath.Join(reader, "images"), dirs: filepath.Join(reader, "dirs"), victim: "n2",
			release: "filevol-ceph", evicts: true},
	}
}

// eachBackend runs story on every shared backend, one after the other (stories kill and
// drain nodes: two at once would meet on them).
func eachBackend(t *testing.T, story func(t *testing.T, b sharedBackend)) {
	for _, b := range sharedBackends(t) {
		t.Run(b.name, func(t *testing.T) { story(t, b) })
	}
}

// eachBackendAtOnce runs story on every shared backend at the same time: for stories
// whose backends share no node they change (the victims differ) and no class. CI time:
// each such story takes one backend's time, not two.
func eachBackendAtOnce(t *testing.T, story func(t *testing.T, b sharedBackend)) {
	for _, b := range sharedBackends(t) {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			story(t, b)
		})
	}
}

// controllerLogged reports whether a shared controller of the backend's release (either
// replica: the leader may have moved) logged a line holding every one of parts. A
// replica on a dead node cannot be read: it is passed over.
func controllerLogged(t *testing.T, be sharedBackend, parts ...string) bool {
	t.Helper()
	pods, err := cs.CoreV1().Pods("filevol").List(t.Context(), metav1.ListOptions{
		LabelSelector: "app.kubernetes.io/instance=" + be.release + ",app.kubernetes.io/component=shared-controller"})
	if err != nil {
		t.Fatalf("the shared controllers of %s: %v", be.release, err)
	}
	for _, p := range pods.Items {
		b, err := cs.CoreV1().Pods("filevol").GetLogs(p.Name, &v1.PodLogOptions{Container: "filevol"}).DoRaw(t.Context())
		if err != nil {
			t.Logf("logs of %s (on %s): %v", p.Name, p.Spec.NodeName, err)
			continue
		}
	lines:
		for _, l := range strings.Split(string(b), "\n") {
			for _, part := range parts {
				if !strings.Contains(l, part) {
					continue lines
				}
			}
			t.Logf("%s: %s", p.Name, l)
			return true
		}
	}
	return false
}
