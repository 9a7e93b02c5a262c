package chartrender

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// sharedPool.clientTLS: the shared node plugin (only it) mounts the Secret
// read-only and the host directory the node's GlusterFS client reads, and
// is told to install the one into the other; nothing of it without a
// Secret's name.
func TestSharedPoolClientTLS(t *testing.T) {
	r := render(t, "sharedPool: {enabled: true, clientTLS: {secretName: gluster-tls, hostDir: /var/lib/gl-tls}}\n")
	node := &daemonSet(t, r).Spec.Template.Spec
	c := container(t, node, "filevol-shared")
	wantArg(t, c, "--shared-pool-tls-secret-dir", "/etc/filevol/shared-pool-tls")
	wantArg(t, c, "--shared-pool-tls-dir", "/var/lib/gl-tls")
	if m := mount(c, "shared-pool-tls-secret"); m == nil || m.MountPath != "/etc/filevol/shared-pool-tls" || !m.ReadOnly {
		t.Errorf("Secret mount %+v", m)
	}
	if m := mount(c, "shared-pool-tls"); m == nil || m.MountPath != "/var/lib/gl-tls" || m.ReadOnly {
		t.Errorf("host directory mount %+v", m)
	}
	if v := volume(node, "shared-pool-tls-secret"); v == nil || v.Secret == nil || v.Secret.SecretName != "gluster-tls" ||
		v.Secret.DefaultMode == nil || *v.Secret.DefaultMode != 0o400 {
		t.Errorf("Secret volume %+v", v)
	}
	if hp := hostPaths(node)["shared-pool-tls"]; hp != "/var/lib/gl-tls DirectoryOrCreate" {
		t.Errorf("host directory volume %q", hp)
	}
	for _, other := range []*corev1.Container{container(t, node, "filevol"), container(t, &sharedDeployment(t, r).Spec.Template.Spec, "filevol")} {
		noArg(t, other, "--shared-pool-tls-secret-dir")
		if mount(other, "shared-pool-tls-secret") != nil || mount(other, "shared-pool-tls") != nil {
			t.Errorf("%s mounts the TLS files", other.Name)
		}
	}
	if m := render(t, sharedOn).Manifest; strings.Contains(m, "shared-pool-tls") {
		t.Error("TLS files mounted without sharedPool.clientTLS.secretName")
	}
	for _, bad := range []string{"clientTLS: {hostDir: relative}", "clientTLS: {secretName: 7}", "clientTLS: {secret: x}"} {
		if err := renderErr(t, "sharedPool: {enabled: true, "+bad+"}\n"); err == nil {
			t.Errorf("%s accepted", bad)
		}
	}
}

// sharedPool.mountWaitSeconds: the shared driver's filevols (controller
// and node) wait that long for the pool's mount, and their startup probe
// allows it and a minute more before the liveness probe counts.
func TestSharedPoolMountWait(t *testing.T) {
	for _, c := range []struct {
		values    string
		arg       string
		threshold int32
	}{{sharedOn, "120s", 36}, {"sharedPool: {enabled: true, mountWaitSeconds: 0}\n", "0s", 12}, {"sharedPool: {enabled: true, mountWaitSeconds: 300}\n", "300s", 72}} {
		r := render(t, c.values)
		for _, ct := range []*corev1.Container{container(t, &sharedDeployment(t, r).Spec.Template.Spec, "filevol"), container(t, &daemonSet(t, r).Spec.Template.Spec, "filevol-shared")} {
			wantArg(t, ct, "--shared-pool-wait", c.arg)
			p := ct.StartupProbe
			if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/healthz" || p.PeriodSeconds != 5 || p.FailureThreshold != c.threshold {
				t.Errorf("%s (%s): startup probe %+v, want failureThreshold %d", ct.Name, c.arg, p, c.threshold)
			}
		}
		noArg(t, container(t, &daemonSet(t, r).Spec.Template.Spec, "filevol"), "--shared-pool-wait")
	}
	if err := renderErr(t, "sharedPool: {enabled: true, mountWaitSeconds: -1}\n"); err == nil {
		t.Error("mountWaitSeconds -1 accepted")
	}
}
