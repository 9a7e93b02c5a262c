//go:build e2e

package stories

import (
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The driver is restarted (SIGTERM, start again) while pods use its volumes:
// the pods keep reading and writing, and afterwards the driver serves new
// volumes and tears the old ones down. Not parallel: it restarts the one
// driver every other story uses (Go runs it before the parallel ones).
func TestDriverRestartKeepsPodsWorking(t *testing.T) {
	ns := namespace(t)
	claim(t, ns, "fs", claimOpts{})
	claim(t, ns, "raw", claimOpts{block: true})
	// Each pod writes a counter through its volume and reads it back every
	// 0.5 s; a failed read or write ends the script, and the pod.
	startPod(t, ns, "fs-app", "fs", false, `
i=0
while true; do
  i=$((i+1)); echo $i > /data/counter; sync
  [ "$(cat /data/counter)" = $i ] || { echo "read back $(cat /data/counter), wrote $i"; exit 1; }
  echo $i; sleep 0.5
done`)
	startPod(t, ns, "raw-app", "raw", true, `
i=0
while true; do
  i=$((i+1)); printf '%-16s' $i | dd of=`+devicePath+` bs=16 count=1 conv=fsync 2>/dev/null
  r=$(dd if=`+devicePath+` bs=16 count=1 2>/dev/null | tr -d ' ')
  [ "$r" = $i ] || { echo "read back $r, wrote $i"; exit 1; }
  echo $i; sleep 0.5
done`)
	before := map[string]int{}
	for _, pod := range []string{"fs-app", "raw-app"} {
		eventually(t, time.Minute, pod+" counting", func() (bool, error) {
			n, err := count(t, ns, pod)
			before[pod] = n
			return err == nil && n >= 2, nil
		})
	}

	restartDriver(t)

	eventually(t, time.Minute, "the kubelet lists the restarted driver", func() (bool, error) {
		n, err := cs.StorageV1().CSINodes().Get(t.Context(), nodeName(t), metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, d := range n.Spec.Drivers {
			if d.Name == driverName {
				return true, nil
			}
		}
		return false, nil
	})
	for pod, was := range before {
		at := counter(t, ns, pod)
		// Progress after the restart, not just during the stop.
		eventually(t, time.Minute, pod+" still writing and reading", func() (bool, error) {
			return counter(t, ns, pod) >= at+5, nil
		})
		p, err := cs.CoreV1().Pods(ns).Get(t.Context(), pod, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if p.Status.Phase != v1.PodRunning || p.Status.ContainerStatuses[0].RestartCount != 0 {
			t.Fatalf("%s: %s, %d restarts", pod, p.Status.Phase, p.Status.ContainerStatuses[0].RestartCount)
		}
		t.Logf("%s: counter %d before the restart, %d after", pod, was, counter(t, ns, pod))
	}

	// The restarted driver provisions, stages and publishes a new volume...
	claim(t, ns, "after", claimOpts{})
	if out := runPod(t, ns, "after", "after", false, `echo fresh > /data/x; cat /data/x`); lastLine(out) != "fresh" {
		t.Fatalf("new volume after the restart: %q", out)
	}
	// ...and unpublishes and unstages the ones it served before (the
	// namespace cleanup then checks that every volume is deleted).
	deletePod(t, ns, "fs-app")
	deletePod(t, ns, "raw-app")
}

// count is the last number a counting pod printed.
func count(t *testing.T, ns, pod string) (int, error) {
	t.Helper()
	return strconv.Atoi(lastLine(podLog(t, ns, pod)))
}

// counter is count, and fails the test when the pod printed something else.
func counter(t *testing.T, ns, pod string) int {
	t.Helper()
	n, err := count(t, ns, pod)
	if err != nil {
		p, _ := cs.CoreV1().Pods(ns).Get(t.Context(), pod, metav1.GetOptions{})
		phase := v1.PodPhase("?")
		if p != nil {
			phase = p.Status.Phase
		}
		t.Fatalf("%s (%s) printed %q", pod, phase, lastLine(podLog(t, ns, pod)))
	}
	return n
}

// nodeName is the one node of the e2e cluster.
func nodeName(t *testing.T) string {
	t.Helper()
	nodes, err := cs.CoreV1().Nodes().List(t.Context(), metav1.ListOptions{})
	if err != nil || len(nodes.Items) != 1 {
		t.Fatalf("want exactly one node: %v", err)
	}
	return strings.TrimSpace(nodes.Items[0].Name)
}
