package chartrender

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// sharedPool.controller.cephCLI runs the shared controller's filevol from
// image.filevolCeph (the filevol image plus the ceph CLI, hack/images.sh
// --ceph), and nothing else: the sidecars, the node plugins and the
// node-local controller keep their images; off (the default), no
// filevol-ceph anywhere.
func TestSharedControllerCephCLI(t *testing.T) {
	const (
		plain = "ghcr.io/filevol/filevol:v0.1.0"
		ceph  = "ghcr.io/filevol/filevol-ceph:v0.1.0"
	)
	off := render(t, sharedOn)
	if c := container(t, &sharedDeployment(t, off).Spec.Template.Spec, "filevol"); c.Image != plain {
		t.Errorf("cephCLI off: the shared controller's filevol runs %s, want %s", c.Image, plain)
	}
	if strings.Contains(off.Manifest, "filevol-ceph") {
		t.Error("cephCLI off: filevol-ceph rendered")
	}

	on := render(t, "sharedPool: {enabled: true, controller: {cephCLI: true}}\n")
	ctrl := &sharedDeployment(t, on).Spec.Template.Spec
	offCtrl := &sharedDeployment(t, off).Spec.Template.Spec
	for _, c := range ctrl.Containers {
		want := container(t, offCtrl, c.Name).Image
		if c.Name == "filevol" {
			want = ceph
			if c.ImagePullPolicy != corev1.PullIfNotPresent {
				t.Errorf("cephCLI on: the filevol container's pull policy %s", c.ImagePullPolicy)
			}
		}
		if c.Image != want {
			t.Errorf("cephCLI on: container %s runs %s, want %s", c.Name, c.Image, want)
		}
	}
	if n := strings.Count(on.Manifest, "filevol-ceph"); n != 1 {
		t.Errorf("cephCLI on: filevol-ceph rendered %d times, want once (the shared controller's filevol)", n)
	}
	for _, spec := range []*corev1.PodSpec{&daemonSet(t, on).Spec.Template.Spec, &deployment(t, on).Spec.Template.Spec} {
		for _, c := range spec.Containers {
			if strings.Contains(c.Image, "filevol-ceph") {
				t.Errorf("cephCLI on: %s of the nodes or the node-local controller runs %s", c.Name, c.Image)
			}
		}
	}

	// A registry of one's own: repository, tag and pull policy are the value's.
	own := render(t, "sharedPool: {enabled: true, controller: {cephCLI: true}}\n"+
		"image: {filevolCeph: {repository: registry.example:5000/fv-ceph, tag: t1, pullPolicy: Always}}\n")
	c := container(t, &sharedDeployment(t, own).Spec.Template.Spec, "filevol")
	if c.Image != "registry.example:5000/fv-ceph:t1" || c.ImagePullPolicy != corev1.PullAlways {
		t.Errorf("image.filevolCeph set: %s %s, want registry.example:5000/fv-ceph:t1 Always", c.Image, c.ImagePullPolicy)
	}

	if err := renderErr(t, "sharedPool: {enabled: true, controller: {cephCLI: \"yes\"}}\n"); err == nil || !strings.Contains(err.Error(), "cephCLI") {
		t.Errorf("cephCLI \"yes\" accepted or not named: %v", err)
	}
}
