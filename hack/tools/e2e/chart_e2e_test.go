//go:build e2e

// Package e2e exercises the chart on the project's e2e cluster: a helm
// upgrade in place keeps a running pod's data and mount, and helm uninstall
// leaves nothing of the release behind but the volumes, which serve again
// after a reinstall. It drives chart.sh (helm, kubectl) and needs root and a
// running cluster:
//
//	make cluster-up
//	cd hack/tools && go test -tags e2e -v -count=1 -timeout 30m ./e2e/
package e2e

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

var here = func() string { _, f, _, _ := runtime.Caller(0); return filepath.Dir(f) }()

// run runs chart.sh with args and returns its trimmed output.
func run(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command(filepath.Join(here, "chart.sh"), args...).CombinedOutput()
	if err != nil {
		t.Fatalf("chart.sh %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

func kubectl(t *testing.T, args ...string) string {
	t.Helper()
	return run(t, append([]string{"kubectl"}, args...)...)
}

// busybox is the image the cluster imports (test/e2e/cluster/versions.env).
func busybox(t *testing.T) string {
	f, err := os.Open(filepath.Join(here, "..", "..", "..", "test", "e2e", "cluster", "versions.env"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if v, ok := strings.CutPrefix(s.Text(), "BUSYBOX_TAG="); ok {
			return strings.Fields(v)[0]
		}
	}
	t.Fatal("no BUSYBOX_TAG in versions.env")
	return ""
}

// apply creates a claim and a pod that runs script with the claim at /data.
func apply(t *testing.T, ns, name, script string) {
	t.Helper()
	manifest := fmt.Sprintf(`
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: %[1]s, namespace: %[2]s}
spec:
  storageClassName: filevol
  accessModes: [ReadWriteOnce]
  resources: {requests: {storage: 64Mi}}
---
apiVersion: v1
kind: Pod
metadata: {name: %[1]s, namespace: %[2]s}
spec:
  terminationGracePeriodSeconds: 1
  containers:
    - name: app
      image: %[3]s
      imagePullPolicy: IfNotPresent
      command: [sh, -c, %[4]q]
      volumeMounts: [{name: data, mountPath: /data}]
  volumes:
    - name: data
      persistentVolumeClaim: {claimName: %[1]s}
`, name, ns, busybox(t), script)
	f := filepath.Join(t.TempDir(), name+".yaml")
	if err := os.WriteFile(f, []byte(manifest), 0o644); err != nil {
		t.Fatal(err)
	}
	kubectl(t, "apply", "-f", f)
	kubectl(t, "-n", ns, "wait", "--for=condition=Ready", "pod/"+name, "--timeout=3m")
}

func pvOf(t *testing.T, ns, claim string) string {
	return kubectl(t, "-n", ns, "get", "pvc", claim, "-o", "jsonpath={.spec.volumeName}")
}

// deleteVolume deletes pod and claim and waits until the PV is gone (the
// driver deleted the image).
func deleteVolume(t *testing.T, ns, name string) {
	t.Helper()
	pv := pvOf(t, ns, name)
	kubectl(t, "-n", ns, "delete", "pod,pvc", name, "--wait=true", "--timeout=2m")
	kubectl(t, "wait", "--for=delete", "pv/"+pv, "--timeout=2m")
}

func TestChartUpgradeAndUninstall(t *testing.T) {
	const ns = "default"
	run(t, "install")

	// snapshots.enabled is auto (values-e2e.yaml leaves it): helm read the
	// cluster's APIs, found the snapshot CRDs up.sh applied and rendered the
	// classes (a helm that saw none would have left them out silently).
	kubectl(t, "get", "volumesnapshotclass", "filevol", "-o", "name")
	kubectl(t, "get", "volumegroupsnapshotclass", "filevol", "filevol-shared", "-o", "name")

	// A pod writing to a volume while the driver is replaced under it.
	apply(t, ns, "upgrade-data", "echo before > /data/f && sleep 86400")
	uid := kubectl(t, "-n", ns, "get", "pod", "upgrade-data", "-o", "jsonpath={.metadata.uid}")
	nodePods := kubectl(t, "-n", "filevol", "get", "pods", "-l", "app.kubernetes.io/component=node", "-o", "jsonpath={.items[*].metadata.uid}")

	// A volume that must survive uninstall.
	apply(t, ns, "kept", "echo kept > /data/f && sleep 86400")
	kept := pvOf(t, ns, "kept")

	// Upgrade in place: a changed value rolls the node pods.
	os.Setenv("FILEVOL_E2E_SKIP_IMAGES", "1")
	run(t, "install", "--set", "logLevel=5")
	kubectl(t, "-n", "filevol", "rollout", "status", "daemonset/filevol-node", "--timeout=3m")
	if now := kubectl(t, "-n", "filevol", "get", "pods", "-l", "app.kubernetes.io/component=node", "-o", "jsonpath={.items[*].metadata.uid}"); now == nodePods {
		t.Fatal("helm upgrade did not replace the node pods; the test proves nothing")
	}
	if got := kubectl(t, "-n", ns, "get", "pod", "upgrade-data", "-o", "jsonpath={.metadata.uid} {.status.phase} {.status.containerStatuses[0].restartCount}"); got != uid+" Running 0" {
		t.Fatalf("after the upgrade the pod is %q, want %q", got, uid+" Running 0")
	}
	if got := kubectl(t, "-n", ns, "exec", "upgrade-data", "--", "sh", "-c", "cat /data/f && echo after >> /data/f && grep -c ' /data ' /proc/mounts"); got != "before\n1" {
		t.Fatalf("after the upgrade /data says %q, want the data and one mount", got)
	}
	// The upgraded driver still provisions and deletes.
	deleteVolume(t, ns, "upgrade-data")
	apply(t, ns, "after-upgrade", "echo new > /data/f && sleep 86400")
	deleteVolume(t, ns, "after-upgrade")

	// Uninstall: chart.sh fails if any pod, RBAC object, CSIDriver,
	// StorageClass or capacity of the release is left.
	kubectl(t, "-n", ns, "delete", "pod", "kept", "--wait=true", "--timeout=2m")
	run(t, "uninstall")
	if got := kubectl(t, "get", "pv", kept, "-o", "jsonpath={.status.phase}"); got != "Bound" {
		t.Fatalf("PV %s is %q after uninstall, want it kept and Bound", kept, got)
	}

	// Reinstall: the kept volume serves its data again.
	run(t, "install")
	apply(t, ns, "kept", "cat /data/f > /tmp/seen && sleep 86400")
	if got := kubectl(t, "-n", ns, "exec", "kept", "--", "cat", "/data/f"); got != "kept" {
		t.Fatalf("kept volume says %q after uninstall and reinstall", got)
	}
	deleteVolume(t, ns, "kept")
	run(t, "uninstall")
}
