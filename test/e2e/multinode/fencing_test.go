//go:build e2e

package multinode

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// An attach refused by fencing, as Kubernetes shows it, and doctor's word on it. A writer on
// n3 appends synced, acknowledged records to an RWO claim of the shared driver.
//
//  1. A pod on n2 for the same claim: Kubernetes' own "Multi-Attach error" (the volume is
//     attached to n3, where the writer uses it); doctor names the writer and the fix.
//  2. n3's kubelet and its filevol-shared container are stopped; its containerd, the writer
//     and its GlusterFS client go on (a node whose agents died, its storage path alive).
//     Once n3 is NotReady it is tainted out-of-service: the writer's pod is deleted, the
//     volume force-detached from n3 and attached to n2, which filevol refuses while n3's
//     loop device holds the image's lock: a FailedAttachVolume event on the pod on n2
//     names n3 and the lock, and doctor explains it and the way out, while n3 goes on
//     writing through its device.
//  3. The writer stopped on n3 (its container killed), n3 still holds the device: still
//     refused. n3's kubelet back and the taint removed: kubelet tears the deleted pod's
//     volume down through filevol (back with its DaemonSet pod), the device goes, and the
//     volume attaches to n2. The pod there reads every acknowledged record, n3's device is
//     gone by then (n2's is the only one on the image), and nothing is added afterwards.
func TestFencingRefusesAttachWhileOldNodeWrites(t *testing.T) {
	const a, b = "n3", "n2"
	state := os.Getenv("FILEVOL_E2E_STATE")
	if state == "" {
		t.Fatal("FILEVOL_E2E_STATE is not set (run.sh sets it)")
	}
	ns := namespace(t)
	claim(t, ns, "log", classShared, "64Mi")
	pod(t, ns, "writer", "log", a,
		`i=0; while true; do i=$((i+1)); printf '%08d\n' $i >> /data/seq; sync; echo "ack $i"; sleep 0.2; done`,
		v1.RestartPolicyNever)
	wp := podRunning(t, ns, "writer", 3*time.Minute)
	writerID := strings.TrimPrefix(wp.Status.ContainerStatuses[0].ContainerID, "containerd://")
	pv := claimVolume(t, ns, "log")
	attachedOnlyTo(t, pv, a, time.Minute)
	handle := volumeHandle(t, pv)

	// 1. Kubernetes' Multi-Attach error.
	pod(t, ns, "reader", "log", b, `sleep 3600`, v1.RestartPolicyAlways)
	ev := podEvent(t, ns, "reader", "Multi-Attach error", 2*time.Minute)
	t.Logf("event on reader: %s %s: %s", ev.Type, ev.Reason, ev.Message)
	time.Sleep(6 * time.Second) // doctor's --min-age=5s
	out := doctor(t, sharedDoctor...)
	for _, want := range []string{"pod/reader -n " + ns + ": stuck in ContainerCreating", "Multi-Attach error",
		"attaches it to node n3 (attached: true), where pod " + ns + "/writer still uses it",
		"delete pod " + ns + "/writer on node n3"} {
		if !strings.Contains(out, want) {
			t.Errorf("doctor on the Multi-Attach error does not say %q", want)
		}
	}

	// 2. n3's kubelet and filevol-shared stopped, the node tainted out-of-service.
	fvShared := nodeContainer(t, a, "filevol-shared")
	logs, _ := filepath.Glob(filepath.Join(state, "nodes", a, "pod-logs", ns+"_writer_*", "c", "*.log"))
	if len(logs) != 1 {
		t.Fatalf("writer's log on %s: %v", a, logs)
	}
	writerLog := logs[0]
	nodeDo(t, "kubelet", "stop", a)
	kubeletUp, tainted := false, false
	t.Cleanup(func() {
		if !kubeletUp {
			out, err := execNode("kubelet", "start", a)
			t.Logf("cleanup: node.sh kubelet start %s: %v %s", a, err, out)
		}
		if tainted {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			t.Logf("cleanup: untaint %s: %s", a, strings.TrimSpace(kubectl(ctx, "taint", "node", a, oosTaint+"-")))
		}
	})
	nodeDo(t, "ctr", a, "-n", "k8s.io", "tasks", "kill", "-s", "SIGKILL", fvShared)
	eventually(t, 30*time.Second, "filevol-shared on "+a+" dead", func() (bool, error) {
		out, err := execNode("ctr", a, "-n", "k8s.io", "tasks", "ls")
		return err == nil && !regexp.MustCompile(fvShared+`\s+\d+\s+RUNNING`).MatchString(out), nil
	})
	nodeReady(t, a, false, 2*time.Minute)
	t.Logf("taint: %s", strings.TrimSpace(kubectl(t.Context(), "taint", "node", a, oosTaint+"=nodeshutdown:NoExecute")))
	tainted = true
	eventually(t, 3*time.Minute, "pod writer deleted (out-of-service)", func() (bool, error) {
		_, err := cs.CoreV1().Pods(ns).Get(t.Context(), "writer", metav1.GetOptions{})
		return err != nil, nil
	})
	ev = podEvent(t, ns, "reader", "still holds the image", 3*time.Minute)
	t.Logf("event on reader: %s %s: %s", ev.Type, ev.Reason, ev.Message)
	if ev.Type != v1.EventTypeWarning || ev.Reason != "FailedAttachVolume" || !strings.Contains(ev.Message, "node "+a) {
		t.Fatalf("the refusal's event: %s %s %q, want a Warning FailedAttachVolume naming node %s", ev.Type, ev.Reason, ev.Message, a)
	}
	acked := lastAck(t, writerLog)
	time.Sleep(6 * time.Second)
	out = doctor(t, sharedDoctor...)
	for _, want := range []string{"pod/reader -n " + ns + ": stuck in ContainerCreating",
		"filevol refuses the attach: another node's loop device still holds the image and could write to it (fencing)",
		"node n3's loop device still holds the image", "start filevol (its node pod) and kubelet on node n3 again",
		"remove the taint once node n3 is back"} {
		if !strings.Contains(out, want) {
			t.Errorf("doctor on the fencing refusal does not say %q", want)
		}
	}
	if more := lastAck(t, writerLog); more <= acked {
		t.Fatalf("the writer on %s stopped writing (ack %d, then %d): the story needs it writing while %s is refused", a, acked, more, b)
	}
	notAttached(t, pv, b)

	// 3. The writer stopped; n3's device still holds the image: still refused.
	nodeDo(t, "ctr", a, "-n", "k8s.io", "tasks", "kill", "-s", "SIGKILL", writerID)
	var final int
	eventually(t, 30*time.Second, "the writer on "+a+" stopped", func() (bool, error) {
		n := lastAck(t, writerLog)
		time.Sleep(time.Second)
		final = lastAck(t, writerLog)
		return n == final, nil
	})
	t.Logf("writer on %s: last acknowledged record %d (%d when the refusal was first seen)", a, final, acked)
	if n := len(loopsOn(t, handle)); n != 1 {
		t.Fatalf("loop devices on the image with only %s's staged: %d, want 1", a, n)
	}
	time.Sleep(5 * time.Second)
	notAttached(t, pv, b)

	nodeDo(t, "kubelet", "start", a)
	kubeletUp = true
	t.Logf("untaint: %s", strings.TrimSpace(kubectl(t.Context(), "taint", "node", a, oosTaint+"-")))
	tainted = false
	podRunning(t, ns, "reader", 6*time.Minute)
	attachedOnlyTo(t, pv, b, time.Minute)
	if devs := loopsOn(t, handle); len(devs) != 1 {
		t.Fatalf("loop devices on the image once %s attached it: %v, want %s's alone (%s's gone before)", b, devs, b, a)
	}
	check := func() int {
		got := strings.Fields(kubectl(t.Context(), "-n", ns, "exec", "reader", "--", "sh", "-c", seqCheck))
		if len(got) < 2 || got[1] != "ok" {
			t.Fatalf("records on %s: %v, want 1..n in order", b, got)
		}
		n, _ := strconv.Atoi(got[0])
		return n
	}
	n := check()
	// A record written and synced but not yet acknowledged when the writer was killed: +1.
	if n < final || n > final+1 {
		t.Fatalf("on %s: records 1..%d, want the %d the writer on %s acknowledged (one more at most)", b, n, final, a)
	}
	time.Sleep(3 * time.Second)
	if again := check(); again != n {
		t.Fatalf("records on %s went from %d to %d with %s's writer gone", b, n, again, a)
	}
	t.Logf("on %s: records 1..%d intact, %d acknowledged on %s", b, n, final, a)
}

// sharedDoctor: doctor on the shared driver's claims (the node view is the node-local
// driver's port: not asked).
var sharedDoctor = []string{"--driver", sharedDriver, "--via", "none"}

// podEvent waits for an event on the pod whose message contains what.
func podEvent(t *testing.T, ns, podName, what string, timeout time.Duration) v1.Event {
	t.Helper()
	var got v1.Event
	eventually(t, timeout, "event on "+podName+" with "+strconv.Quote(what), func() (bool, error) {
		l, err := cs.CoreV1().Events(ns).List(t.Context(), metav1.ListOptions{FieldSelector: "involvedObject.name=" + podName})
		if err != nil {
			return false, err
		}
		for _, e := range l.Items {
			if strings.Contains(e.Message, what) {
				got = e
				return true, nil
			}
		}
		return false, nil
	})
	return got
}

// notAttached fails unless pv's attachment to node exists and is not attached.
func notAttached(t *testing.T, pv, node string) {
	t.Helper()
	at, err := attachments(t.Context(), pv)
	if err != nil || at[node] {
		t.Fatalf("volume %s attached to %s (%v, %v) while the old node's device holds the image", pv, node, at, err)
	}
}

// nodeContainer is the container ID of the filevol node pod's container name on node.
func nodeContainer(t *testing.T, node, name string) string {
	t.Helper()
	l, err := cs.CoreV1().Pods("filevol").List(t.Context(), metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range l.Items {
		for _, c := range p.Status.ContainerStatuses {
			if c.Name == name && c.ContainerID != "" {
				return strings.TrimPrefix(c.ContainerID, "containerd://")
			}
		}
	}
	t.Fatalf("no container %s in a filevol pod on %s", name, node)
	return ""
}

var ackLine = regexp.MustCompile(`(?m)ack (\d+)$`)

// lastAck is the last "ack N" the writer printed, from its CRI log file on its node.
func lastAck(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("writer's log: %v", err)
	}
	m := ackLine.FindAllStringSubmatch(string(b), -1)
	if len(m) == 0 {
		return 0
	}
	n, _ := strconv.Atoi(m[len(m)-1][1])
	return n
}

// nodeDo runs node.sh VERB NAME ARGS... and fails the test if it fails.
func nodeDo(t *testing.T, verb, name string, args ...string) string {
	t.Helper()
	out, err := execNode(verb, name, args...)
	if err != nil {
		t.Fatalf("node.sh %s %s %v: %v %s", verb, name, args, err, out)
	}
	return out
}
