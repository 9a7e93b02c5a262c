package chartrender

import (
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
)

// The release the tests render: a name that differs from the chart's, so
// names are "<release>-filevol-<component>".
const (
	testRelease   = "fv"
	testNamespace = "storage"
	nodeName      = "fv-filevol-node"
	ctrlName      = "fv-filevol-controller"
	sharedName    = "fv-filevol-shared-controller"
)

// render renders values for a cluster with the snapshot CRDs (SnapshotAPIs,
// as the e2e cluster and any cluster a snapshot test means): with
// snapshots.enabled=auto everything renders, as with true. renderOn chooses
// the cluster's extra APIs (nil: none, plain `helm template`).
func render(t *testing.T, values string) *Result {
	t.Helper()
	return renderOn(t, values, SnapshotAPIs)
}

func renderOn(t *testing.T, values string, apiVersions []string) *Result {
	t.Helper()
	dir, err := ChartDir()
	if err != nil {
		t.Fatal(err)
	}
	r, err := RenderOn(dir, testRelease, testNamespace, values, apiVersions)
	if err != nil {
		t.Fatalf("render with values %q and APIs %v: %v", values, apiVersions, err)
	}
	return r
}

func renderErr(t *testing.T, values string) error {
	t.Helper()
	dir, err := ChartDir()
	if err != nil {
		t.Fatal(err)
	}
	_, err = RenderOn(dir, testRelease, testNamespace, values, SnapshotAPIs)
	return err
}

func daemonSet(t *testing.T, r *Result) *appsv1.DaemonSet {
	t.Helper()
	o := r.Find("DaemonSet", nodeName)
	if o == nil {
		t.Fatalf("no DaemonSet %s; kinds %v", nodeName, r.Kinds())
	}
	return o.Typed.(*appsv1.DaemonSet)
}

func deployment(t *testing.T, r *Result) *appsv1.Deployment {
	t.Helper()
	o := r.Find("Deployment", ctrlName)
	if o == nil {
		t.Fatalf("no Deployment %s; kinds %v", ctrlName, r.Kinds())
	}
	return o.Typed.(*appsv1.Deployment)
}

func sharedDeployment(t *testing.T, r *Result) *appsv1.Deployment {
	t.Helper()
	o := r.Find("Deployment", sharedName)
	if o == nil {
		t.Fatalf("no Deployment %s; kinds %v", sharedName, r.Kinds())
	}
	return o.Typed.(*appsv1.Deployment)
}

func containerNames(spec *corev1.PodSpec) []string {
	var n []string
	for _, c := range spec.Containers {
		n = append(n, c.Name)
	}
	return n
}

func containerImages(spec *corev1.PodSpec) []string {
	var n []string
	for _, c := range spec.Containers {
		n = append(n, c.Image)
	}
	return n
}

func container(t *testing.T, spec *corev1.PodSpec, name string) *corev1.Container {
	t.Helper()
	for i := range spec.Containers {
		if spec.Containers[i].Name == name {
			return &spec.Containers[i]
		}
	}
	t.Fatalf("no container %q in %v", name, containerNames(spec))
	return nil
}

func hasContainer(spec *corev1.PodSpec, name string) bool {
	return slices.Contains(containerNames(spec), name)
}

// arg returns the value of --name=value (or "" with ok for a bare --name).
func arg(c *corev1.Container, name string) (string, bool) {
	for _, a := range c.Args {
		if a == name {
			return "", true
		}
		if v, ok := strings.CutPrefix(a, name+"="); ok {
			return v, true
		}
	}
	return "", false
}

func wantArg(t *testing.T, c *corev1.Container, name, value string) {
	t.Helper()
	v, ok := arg(c, name)
	if !ok || v != value {
		t.Errorf("%s: %s = %q (present %v), want %q; args %v", c.Name, name, v, ok, value, c.Args)
	}
}

func noArg(t *testing.T, c *corev1.Container, name string) {
	t.Helper()
	if _, ok := arg(c, name); ok {
		t.Errorf("%s: unexpected %s in %v", c.Name, name, c.Args)
	}
}

// fieldRefEnv returns the fieldPath behind env var name, or "".
func fieldRefEnv(c *corev1.Container, name string) string {
	for _, e := range c.Env {
		if e.Name == name && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
			return e.ValueFrom.FieldRef.FieldPath
		}
	}
	return ""
}

func envValue(c *corev1.Container, name string) (string, bool) {
	for _, e := range c.Env {
		if e.Name == name && e.ValueFrom == nil {
			return e.Value, true
		}
	}
	return "", false
}

func mount(c *corev1.Container, volume string) *corev1.VolumeMount {
	for i := range c.VolumeMounts {
		if c.VolumeMounts[i].Name == volume {
			return &c.VolumeMounts[i]
		}
	}
	return nil
}

func mountNames(c *corev1.Container) []string {
	var n []string
	for _, m := range c.VolumeMounts {
		n = append(n, m.Name)
	}
	slices.Sort(n)
	return n
}

func volume(spec *corev1.PodSpec, name string) *corev1.Volume {
	for i := range spec.Volumes {
		if spec.Volumes[i].Name == name {
			return &spec.Volumes[i]
		}
	}
	return nil
}

// hostPaths maps each hostPath volume of the pod to "path type".
func hostPaths(spec *corev1.PodSpec) map[string]string {
	m := map[string]string{}
	for _, v := range spec.Volumes {
		if hp := v.HostPath; hp != nil {
			typ := ""
			if hp.Type != nil {
				typ = string(*hp.Type)
			}
			m[v.Name] = hp.Path + " " + typ
		}
	}
	return m
}

func propagation(m *corev1.VolumeMount) string {
	if m == nil || m.MountPropagation == nil {
		return ""
	}
	return string(*m.MountPropagation)
}

func privileged(c *corev1.Container) bool {
	return c.SecurityContext != nil && c.SecurityContext.Privileged != nil && *c.SecurityContext.Privileged
}

// unprivileged checks the hardening every container but the node's filevol gets.
func unprivileged(t *testing.T, c *corev1.Container) {
	t.Helper()
	sc := c.SecurityContext
	if sc == nil || privileged(c) {
		t.Errorf("%s: privileged or no securityContext", c.Name)
		return
	}
	if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		t.Errorf("%s: allowPrivilegeEscalation not false", c.Name)
	}
	if sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) > 0 {
		t.Errorf("%s: capabilities %+v, want drop ALL and nothing added", c.Name, sc.Capabilities)
	}
	if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		t.Errorf("%s: root file system not read-only", c.Name)
	}
}
