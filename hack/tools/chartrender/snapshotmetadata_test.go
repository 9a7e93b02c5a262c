package chartrender

import (
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
)

// cbtAPIs: a cluster with the snapshot CRDs and external-snapshot-metadata's
// SnapshotMetadataService CRD.
var cbtAPIs = append(slices.Clone(SnapshotAPIs), "cbt.storage.k8s.io/v1beta1",
	"cbt.storage.k8s.io/v1beta1/SnapshotMetadataService")

// Both drivers able to serve changed-block tracking: the node-local one's
// snapshots in its controller (one pool every process sees), and the
// shared-pool driver.
const cbtBoth = "pool: {shared: true}\nsnapshots: {snapshotter: controller}\nsharedPool: {enabled: true}\n"

func metadataContainer(d *appsv1.Deployment) *corev1.Container {
	for i, c := range d.Spec.Template.Spec.Containers {
		if c.Name == "csi-snapshot-metadata" {
			return &d.Spec.Template.Spec.Containers[i]
		}
	}
	return nil
}

func TestSnapshotMetadataOnlyWhereItCanServe(t *testing.T) {
	for _, tc := range []struct {
		name, values       string
		apis               []string
		wantLocal, wantShd bool
	}{
		{"no CRD, auto", cbtBoth, SnapshotAPIs, false, false},
		{"CRD, auto, both serve", cbtBoth, cbtAPIs, true, true},
		// Snapshots in each node's pool: one address cannot reach them.
		{"CRD, snapshotter per node", "sharedPool: {enabled: true}\n", cbtAPIs, false, true},
		{"CRD, switched off", cbtBoth + "snapshotMetadata: {enabled: false}\n", cbtAPIs, false, false},
		{"no CRD, true", cbtBoth + "snapshotMetadata: {enabled: true}\n", SnapshotAPIs, true, true},
		// Nothing to describe without snapshots.
		{"CRD, no snapshots", "pool: {shared: true}\nsnapshots: {snapshotter: controller, enabled: false}\n", cbtAPIs, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := renderOn(t, tc.values, tc.apis)
			if got := metadataContainer(deployment(t, r)) != nil; got != tc.wantLocal {
				t.Errorf("node-local controller runs csi-snapshot-metadata: %v, want %v", got, tc.wantLocal)
			}
			if r.Find("Deployment", sharedName) != nil {
				if got := metadataContainer(sharedDeployment(t, r)) != nil; got != tc.wantShd {
					t.Errorf("shared controller runs csi-snapshot-metadata: %v, want %v", got, tc.wantShd)
				}
			}
			sms := r.Find("SnapshotMetadataService", "filevol.csi.io") != nil
			if sms != tc.wantLocal {
				t.Errorf("SnapshotMetadataService filevol.csi.io rendered: %v, want %v", sms, tc.wantLocal)
			}
			any := tc.wantLocal || tc.wantShd
			if got := r.Find("ClusterRole", "fv-filevol-snapshot-metadata-client") != nil; got != any {
				t.Errorf("client ClusterRole rendered: %v, want %v", got, any)
			}
		})
	}
}

// The certificate the chart makes verifies, under the CA each
// SnapshotMetadataService hands its clients, for the host the service
// names; the sidecars serve it, on the ports the Services target.
func TestSnapshotMetadataTLSAndAddresses(t *testing.T) {
	r := renderOn(t, cbtBoth+"snapshotMetadata: {extraIPs: [127.0.0.1], address: {local: \"127.0.0.1:9818\"}}\n", cbtAPIs)
	sec := r.Find("Secret", "fv-filevol-snapshot-metadata-tls")
	if sec == nil {
		t.Fatalf("no TLS Secret; kinds %v", r.Kinds())
	}
	s := sec.Typed.(*corev1.Secret)
	leaf := parseCert(t, s.Data["tls.crt"])
	if len(s.Data["tls.key"]) == 0 {
		t.Error("the TLS Secret has no tls.key")
	}
	for driver, want := range map[string]struct{ addr, audience string }{
		"filevol.csi.io":        {"127.0.0.1:9818", "filevol.csi.io"},
		"shared.filevol.csi.io": {"fv-filevol-snapshot-metadata-shared.storage:6443", "shared.filevol.csi.io"},
	} {
		o := r.Find("SnapshotMetadataService", driver)
		if o == nil {
			t.Fatalf("no SnapshotMetadataService %s", driver)
		}
		spec := o.Map["spec"].(map[string]any)
		if spec["address"] != want.addr || spec["audience"] != want.audience {
			t.Errorf("%s: address %v audience %v, want %s %s", driver, spec["address"], spec["audience"], want.addr, want.audience)
		}
		caPEM, err := base64.StdEncoding.DecodeString(spec["caCert"].(string))
		if err != nil {
			t.Fatalf("%s: caCert: %v", driver, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(caPEM) {
			t.Fatalf("%s: caCert holds no certificate", driver)
		}
		host := strings.Split(want.addr, ":")[0]
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: host}); err != nil {
			t.Errorf("%s: the sidecars' certificate does not verify for %s under the service's CA: %v", driver, host, err)
		}
	}
	for _, c := range []struct {
		d    *appsv1.Deployment
		svc  string
		port int32
	}{{deployment(t, r), "fv-filevol-snapshot-metadata", 9818}, {sharedDeployment(t, r), "fv-filevol-snapshot-metadata-shared", 9820}} {
		mc := metadataContainer(c.d)
		if mc == nil {
			t.Fatalf("%s: no csi-snapshot-metadata container", c.d.Name)
		}
		for _, a := range []string{"--csi-address=/csi/csi.sock", "--tls-cert=/tls/tls.crt", "--tls-key=/tls/tls.key"} {
			if !slices.Contains(mc.Args, a) {
				t.Errorf("%s: csi-snapshot-metadata args %v lack %s", c.d.Name, mc.Args, a)
			}
		}
		if !slices.ContainsFunc(mc.Ports, func(p corev1.ContainerPort) bool { return p.ContainerPort == c.port }) {
			t.Errorf("%s: csi-snapshot-metadata ports %v, want %d", c.d.Name, mc.Ports, c.port)
		}
		svc := r.Find("Service", c.svc)
		if svc == nil {
			t.Fatalf("no Service %s", c.svc)
		}
		if tp := svc.Typed.(*corev1.Service).Spec.Ports[0].TargetPort.IntValue(); tp != int(c.port) {
			t.Errorf("Service %s targets %d, the sidecar listens on %d", c.svc, tp, c.port)
		}
		if !slices.ContainsFunc(c.d.Spec.Template.Spec.Volumes, func(v corev1.Volume) bool {
			return v.Secret != nil && v.Secret.SecretName == "fv-filevol-snapshot-metadata-tls"
		}) {
			t.Errorf("%s mounts no TLS Secret", c.d.Name)
		}
	}
	b := r.Find("ClusterRoleBinding", "fv-filevol-snapshot-metadata").Typed.(*rbacv1.ClusterRoleBinding)
	var sas []string
	for _, s := range b.Subjects {
		sas = append(sas, s.Name)
	}
	if !slices.Equal(sas, []string{ctrlName, sharedName}) {
		t.Errorf("the sidecars' role is bound to %v, want the two controllers' ServiceAccounts", sas)
	}
}

// A Secret the user names must exist (its CA goes into the services);
// enabled: true where no driver can serve is refused.
func TestSnapshotMetadataRefusals(t *testing.T) {
	for _, tc := range []struct{ values, want string }{
		{cbtBoth + "snapshotMetadata: {tlsSecretName: my-tls}\n", "Secret my-tls not found"},
		{"snapshotMetadata: {enabled: true}\n", "snapshotter: controller"},
	} {
		_, err := RenderOn(mustChartDir(t), testRelease, testNamespace, tc.values, cbtAPIs)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("values %q: error %v, want one saying %q", tc.values, err, tc.want)
		}
	}
}

func parseCert(t *testing.T, b []byte) *x509.Certificate {
	t.Helper()
	blk, _ := pem.Decode(b)
	if blk == nil {
		t.Fatal("tls.crt is not PEM")
	}
	c, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func mustChartDir(t *testing.T) string {
	t.Helper()
	d, err := ChartDir()
	if err != nil {
		t.Fatal(err)
	}
	return d
}
