//go:build e2e

package multinode

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The stories run one after the other: story 3 takes a node away, which the other two
// must not see.

// Capacity steers the scheduler. The three pools differ in size (run.sh: vm 1536 MiB,
// n2 512 MiB, n3 1024 MiB): a claim that only vm's pool can hold lands on vm; one no
// pool can hold stays Pending, and doctor says why; CSIStorageCapacity follows a thick
// volume as it comes and goes.
func TestCapacitySteersScheduler(t *testing.T) {
	ns := namespace(t)
	var caps map[string]int64
	eventually(t, 3*time.Minute, "a capacity object per node", func() (bool, error) {
		var err error
		caps, err = capacities(t.Context(), classThick)
		return len(caps) == 3, err
	})
	t.Logf("capacity of %s: vm %s, n2 %s, n3 %s", classThick, mib(caps["vm"]), mib(caps["n2"]), mib(caps["n3"]))
	if !(caps["n2"] < caps["n3"] && caps["n3"] < caps["vm"]) {
		t.Fatalf("capacities %v: want n2 < n3 < vm (pools of 512, 1024 and 1536 MiB)", caps)
	}
	// Too big for n2 and n3, fits vm: between n3's and vm's capacity.
	big := (caps["n3"] + caps["vm"]) / 2 >> 20 << 20
	claim(t, ns, "big", classThick, mib(big))
	pod(t, ns, "big", "big", "", `echo big > /data/f; sync; sleep 3600`, v1.RestartPolicyAlways)
	p := podRunning(t, ns, "big", 3*time.Minute)
	pvn, _ := pvNode(t, ns, "big")
	if p.Spec.NodeName != "vm" || pvn != "vm" {
		t.Fatalf("claim of %s: pod on %s, volume on %s; want both on vm, the only pool that holds it", mib(big), p.Spec.NodeName, pvn)
	}
	// The thick volume took its size from vm's pool: the capacity object says so.
	eventually(t, 3*time.Minute, "vm's capacity down by the thick volume", func() (bool, error) {
		c, err := capacities(t.Context(), classThick)
		return err == nil && c["vm"] <= caps["vm"]-big, err
	})

	// Bigger than any pool: no node can take it; the claim and its pod stay Pending.
	huge := caps["vm"] + caps["n3"]
	claim(t, ns, "huge", classThick, mib(huge))
	pod(t, ns, "huge", "huge", "", `sleep 3600`, v1.RestartPolicyAlways)
	eventually(t, time.Minute, "pod huge found unschedulable", func() (bool, error) {
		p, err := cs.CoreV1().Pods(ns).Get(t.Context(), "huge", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, c := range p.Status.Conditions {
			if c.Type == v1.PodScheduled && c.Status == v1.ConditionFalse && c.Reason == v1.PodReasonUnschedulable {
				t.Logf("scheduler: %s", c.Message)
				return strings.Contains(c.Message, "did not have enough free storage"), nil
			}
		}
		return false, nil
	})
	time.Sleep(6 * time.Second) // doctor's --min-age=5s: a claim younger than that is not stuck yet
	out := doctor(t)
	for _, want := range []string{"pvc/huge -n " + ns, "did not have enough free storage", "CSIStorageCapacity available:"} {
		if !strings.Contains(out, want) {
			t.Errorf("doctor does not name %q for the claim no node can hold", want)
		}
	}
	if c, err := cs.CoreV1().PersistentVolumeClaims(ns).Get(t.Context(), "huge", metav1.GetOptions{}); err != nil || c.Status.Phase != v1.ClaimPending {
		t.Fatalf("claim huge: %v %v, want Pending", c.Status.Phase, err)
	}

	// The volume goes: vm's capacity comes back.
	if err := cs.CoreV1().Pods(ns).Delete(t.Context(), "big", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 2*time.Minute, "pod big gone", func() (bool, error) {
		_, err := cs.CoreV1().Pods(ns).Get(t.Context(), "big", metav1.GetOptions{})
		return err != nil, nil
	})
	if err := cs.CoreV1().PersistentVolumeClaims(ns).Delete(t.Context(), "big", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 3*time.Minute, "vm's capacity back after the volume is deleted", func() (bool, error) {
		c, err := capacities(t.Context(), classThick)
		return err == nil && c["vm"] >= caps["vm"]-big/8, err
	})
}

// One claim, one node: 30 WaitForFirstConsumer claims, each with a pod the scheduler
// places. Every volume is made on its pod's node (its node affinity names that node),
// and every claim has exactly one volume, though a provisioner runs on every node.
func TestOneClaimOneNode(t *testing.T) {
	ns := namespace(t)
	const n = 30
	for i := range n {
		claim(t, ns, fmt.Sprintf("c%02d", i), classThin, "16Mi")
		pod(t, ns, fmt.Sprintf("p%02d", i), fmt.Sprintf("c%02d", i), "", `echo ok > /data/f; sync; sleep 3600`, v1.RestartPolicyAlways)
	}
	eventually(t, 8*time.Minute, fmt.Sprintf("%d pods Running", n), func() (bool, error) {
		l, err := cs.CoreV1().Pods(ns).List(t.Context(), metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		ready := 0
		for _, p := range l.Items {
			for _, c := range p.Status.Conditions {
				if c.Type == v1.PodReady && c.Status == v1.ConditionTrue {
					ready++
				}
			}
		}
		return ready == n, nil
	})
	perNode, podNode := map[string]int{}, map[string]string{}
	for i := range n {
		p, err := cs.CoreV1().Pods(ns).Get(t.Context(), fmt.Sprintf("p%02d", i), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		c := fmt.Sprintf("c%02d", i)
		pvn, _ := pvNode(t, ns, c)
		if pvn != p.Spec.NodeName {
			t.Errorf("claim %s: volume on %s, its pod on %s", c, pvn, p.Spec.NodeName)
		}
		perNode[p.Spec.NodeName]++
		podNode[c] = p.Spec.NodeName
	}
	t.Logf("pods per node: %v", perNode)
	if len(perNode) < 2 {
		t.Errorf("all %d pods on one node (%v): the scheduler did not spread them", n, perNode)
	}
	// No claim provisioned twice: exactly one PV of the driver per claim.
	pvs, err := cs.CoreV1().PersistentVolumes().List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	per := map[string]int{}
	for _, pv := range pvs.Items {
		if pv.Spec.ClaimRef != nil && pv.Spec.ClaimRef.Namespace == ns {
			per[pv.Spec.ClaimRef.Name]++
		}
	}
	for i := range n {
		if c := per[fmt.Sprintf("c%02d", i)]; c != 1 {
			t.Errorf("claim c%02d has %d volumes", i, c)
		}
	}
	provisionedOnlyByItsNode(t, ns, podNode)
	// Nor a volume left in any node's pool: a provisioner on another node, or a
	// CreateVolume whose PV was never saved, would leave one that no PV names.
	out := doctor(t)
	for _, bad := range []string{"no PersistentVolume names", "no node-side view"} {
		if strings.Contains(out, bad) {
			t.Errorf("doctor says %q", bad)
		}
	}
}

// provisionedOnlyByItsNode: every ProvisioningSucceeded of a claim comes from the
// csi-provisioner of its pod's node (the event's source is "<driver>_<host name>_<uuid>",
// and a driver pod shares its node's host name). A claim may have more
// than one: the provisioner library handles a claim again when an update of it comes
// before its informer has the new PV, and then CreateVolume (idempotent by name) returns
// the same volume and the PV's create finds it saved; it reports success again.
func provisionedOnlyByItsNode(t *testing.T, ns string, podNode map[string]string) {
	t.Helper()
	ev, err := cs.CoreV1().Events(ns).List(t.Context(), metav1.ListOptions{FieldSelector: "reason=ProvisioningSucceeded"})
	if err != nil {
		t.Fatal(err)
	}
	succ := map[string]int{}
	for _, e := range ev.Items {
		c := e.InvolvedObject.Name
		succ[c] += int(max(e.Count, 1))
		if e.Count > 1 || succ[c] > 1 {
			t.Logf("claim %s: ProvisioningSucceeded %d time(s) from %s: %s", c, max(e.Count, 1), e.Source.Component, e.Message)
		}
		if node := podNode[c]; !strings.Contains(e.Source.Component, "_"+node+"_") {
			t.Errorf("claim %s (pod on %s): ProvisioningSucceeded from %q, not that node's provisioner", c, node, e.Source.Component)
		}
	}
	for c := range podNode {
		if succ[c] == 0 {
			t.Errorf("claim %s: no ProvisioningSucceeded event", c)
		}
	}
}

// A node dies. n2 holds a volume with data; its kubelet, containerd, filevol and
// containers are killed and its network is cut. doctor reports its volume unreachable
// and the claim pinned to it; a pod of that claim cannot run elsewhere (a node-local
// volume cannot move). Once n2 returns, the pod runs again with its data.
func TestNodeDies(t *testing.T) {
	const victim = "n2"
	ns := namespace(t)
	claim(t, ns, "data", classThin, "64Mi")
	pod(t, ns, "app", "data", victim,
		`[ -s /data/blob ] || { head -c 1048576 /dev/urandom > /data/blob; sha256sum /data/blob > /data/sum; sync; }; sleep 3600`,
		v1.RestartPolicyAlways)
	podRunning(t, ns, "app", 3*time.Minute)
	sum := strings.TrimSpace(kubectl(t.Context(), "-n", ns, "exec", "app", "--", "cat", "/data/sum"))
	if !strings.Contains(sum, "/data/blob") {
		t.Fatalf("no checksum written: %q", sum)
	}
	pvn, pv := pvNode(t, ns, "data")
	if pvn != victim {
		t.Fatalf("volume on %s, want %s", pvn, victim)
	}

	node(t, "kill", victim)
	revived := false
	t.Cleanup(func() {
		if !revived {
			out, err := execNode("revive", victim)
			t.Logf("cleanup: node.sh revive %s: %v %s", victim, err, out)
		}
	})
	nodeReady(t, victim, false, 2*time.Minute)
	// NotReady comes first, the node controller's taint a moment later: a pod created
	// in between is bound to the dead node (seen: "Successfully assigned ... to n2").
	nodeTainted(t, victim, "node.kubernetes.io/unreachable", v1.TaintEffectNoSchedule, 2*time.Minute)
	// A pod of the same claim, free to go anywhere: the volume's node affinity keeps it
	// off the live nodes, so it waits for n2.
	pod(t, ns, "elsewhere", "data", "", `cat /data/sum; sleep 3600`, v1.RestartPolicyAlways)
	eventually(t, time.Minute, "pod elsewhere unschedulable: its volume lives on "+victim, func() (bool, error) {
		p, err := cs.CoreV1().Pods(ns).Get(t.Context(), "elsewhere", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, c := range p.Status.Conditions {
			if c.Type == v1.PodScheduled && c.Status == v1.ConditionFalse && c.Reason == v1.PodReasonUnschedulable {
				t.Logf("scheduler: %s", c.Message)
				return strings.Contains(c.Message, "didn't match PersistentVolume's node affinity"), nil
			}
		}
		return false, nil
	})
	out := doctor(t)
	for _, want := range []string{pv.Name, victim} {
		if !strings.Contains(out, want) {
			t.Errorf("doctor output does not name %q (the volume on the dead node, and the node)", want)
		}
	}
	if !strings.Contains(out, "unreachable: its node "+victim+" is NotReady") || !strings.Contains(out, "claim "+ns+"/data is pinned to it") {
		t.Errorf("doctor does not say node %s is unreachable or NotReady", victim)
	}

	node(t, "revive", victim)
	revived = true
	back := time.Now()
	nodeReady(t, victim, true, 3*time.Minute)
	// The API still showed the pod Running while its node was dead: wait for a container
	// the revived kubelet started.
	eventually(t, 4*time.Minute, "pod app running again, in a container started after the node came back", func() (bool, error) {
		p, err := cs.CoreV1().Pods(ns).Get(t.Context(), "app", metav1.GetOptions{})
		if err != nil || len(p.Status.ContainerStatuses) == 0 {
			return false, err
		}
		r := p.Status.ContainerStatuses[0].State.Running
		return r != nil && p.Status.ContainerStatuses[0].Ready && r.StartedAt.After(back.Add(-time.Second)), nil
	})
	again := strings.TrimSpace(kubectl(t.Context(), "-n", ns, "exec", "app", "--", "sh", "-c", "cat /data/sum; sha256sum /data/blob"))
	lines := strings.Split(again, "\n")
	if len(lines) != 2 || strings.Fields(lines[0])[0] != strings.Fields(lines[1])[0] || lines[0] != sum {
		t.Fatalf("after the node came back: %q, want the checksum %q twice", again, sum)
	}
	// The waiting pod lands where the volume is, once that node is back.
	p := podRunning(t, ns, "elsewhere", 3*time.Minute)
	if p.Spec.NodeName != victim {
		t.Fatalf("pod elsewhere runs on %s, want %s (its volume's node)", p.Spec.NodeName, victim)
	}
}

func execNode(verb, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	return runProg(ctx, nodeSh, append([]string{verb, name}, args...)...)
}
