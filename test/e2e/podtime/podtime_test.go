//go:build e2e

package podtime

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

const (
	localPathNS = "local-path-storage" // test/e2e/localpath/manifest.yaml
	filevolName = "filevol.csi.io"
	// How long one sample, or one burst, may take to run before the test
	// fails: far above anything measured, below the step's timeout.
	runTimeout = 4 * time.Minute
)

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func envInt(t *testing.T, k string, def int) int {
	v := os.Getenv(k)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		t.Fatalf("%s=%q: want a positive number", k, v)
	}
	return n
}

// run is one measurement: its cluster, namespace, tracker and samples.
type run struct {
	cs      kubernetes.Interface
	ns      string
	image   string
	metrics string // filevol's HTTP endpoint, "" when not given
	trk     *tracker
	mu      sync.Mutex
	seq     int
}

func TestTimeToRunning(t *testing.T) {
	kc := os.Getenv("FILEVOL_E2E_KUBECONFIG")
	if kc == "" {
		t.Fatal("FILEVOL_E2E_KUBECONFIG is not set: this test needs the e2e cluster (test/e2e/run.sh)")
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kc)
	if err != nil {
		t.Fatal(err)
	}
	// The test makes up to 100 objects at once: the client must not be what
	// is measured.
	cfg.QPS, cfg.Burst = 200, 400
	r := &run{
		cs:      kubernetes.NewForConfigOrDie(cfg),
		image:   envOr("FILEVOL_E2E_IMAGE", "registry.k8s.io/e2e-test-images/busybox:1.37.0-1"),
		metrics: os.Getenv("FILEVOL_E2E_DRIVER_URL"),
		trk:     newTracker(),
	}
	rounds := envInt(t, "FILEVOL_E2E_PODTIME_ROUNDS", 10)
	burst := envInt(t, "FILEVOL_E2E_PODTIME_BURST", 50)
	classes := strings.Split(envOr("FILEVOL_E2E_PODTIME_CLASSES", "filevol,local-path"), ",")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	rep := &report{Start: time.Now().UTC(), LoadStart: loadavg(), Rounds: rounds, Burst: burst, Classes: classes,
		Provisioner: map[string]string{}}
	helperNS := ""
	for _, c := range classes {
		sc, err := r.cs.StorageV1().StorageClasses().Get(ctx, c, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("StorageClass %s: %v", c, err)
		}
		rep.Provisioner[c] = sc.Provisioner
		if sc.Provisioner == "rancher.io/local-path" {
			helperNS = localPathNS
		}
	}
	r.ns = fmt.Sprintf("podtime-%d", time.Now().Unix())
	if _, err := r.cs.CoreV1().Namespaces().Create(ctx, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: r.ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.cleanup(t, ""); r.deleteNamespace(t) })
	ready := make(chan struct{})
	watchErr := make(chan error, 1)
	go func() { watchErr <- r.trk.run(ctx, r.cs, r.ns, helperNS, ready) }()
	select {
	case <-ready:
	case err := <-watchErr:
		t.Fatal("watch:", err)
	}

	// One at a time: the classes take turns, the first of a round alternating,
	// so that neither always follows the other's teardown. The pods stay up
	// (idle) until the rounds are over: deleting them in between would add a
	// teardown to every round.
	for i := range rounds {
		order := slices.Clone(classes)
		if i%2 == 1 {
			slices.Reverse(order)
		}
		for _, c := range order {
			s, err := r.measure(ctx, c, 1, rep.Provisioner[c] == filevolName)
			if err != nil {
				t.Fatalf("round %d, %s: %v", i+1, c, err)
			}
			rep.add("serial", c, s)
		}
	}
	// The report so far: a later part that fails leaves these figures.
	rep.End, rep.LoadEnd = time.Now().UTC(), loadavg()
	if err := rep.write(envOr("FILEVOL_E2E_PODTIME_OUT", ".")); err != nil {
		t.Fatal(err)
	}
	r.cleanup(t, "")
	// All at once, each class alone on the node, one after the other.
	for _, c := range classes {
		s, err := r.measure(ctx, c, burst, rep.Provisioner[c] == filevolName)
		if err != nil {
			t.Fatalf("%d at once, %s: %v", burst, c, err)
		}
		rep.add("burst", c, s)
		r.cleanup(t, c)
	}
	rep.End, rep.LoadEnd = time.Now().UTC(), loadavg()
	if err := rep.write(envOr("FILEVOL_E2E_PODTIME_OUT", ".")); err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + rep.markdown())
}

// sampleSet is what one measure call saw.
type sampleSet struct {
	Traces []*trace
	Calls  perCall // filevol's CSI calls in the meantime (filevol classes only)
}

// measure creates n claims of class and n pods that mount them, at once,
// and waits until every pod runs.
func (r *run) measure(ctx context.Context, class string, n int, scrapeDriver bool) (sampleSet, error) {
	var before callTimes
	var err error
	if scrapeDriver && r.metrics != "" {
		if before, err = scrape(ctx, r.metrics); err != nil {
			return sampleSet{}, err
		}
	}
	set := sampleSet{Traces: make([]*trace, n)}
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		r.mu.Lock()
		r.seq++
		name := fmt.Sprintf("%s-%03d", class, r.seq)
		r.mu.Unlock()
		set.Traces[i] = &trace{Class: class, Claim: name}
		r.trk.add(set.Traces[i])
		wg.Go(func() { errs[i] = r.create(ctx, set.Traces[i]) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return set, err
	}
	deadline := time.Now().Add(runTimeout)
	for !r.trk.allRunning(set.Traces) {
		if time.Now().After(deadline) {
			return set, fmt.Errorf("not all %d pods Running after %s: %s", n, runTimeout, r.trk.pending(set.Traces))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if scrapeDriver && r.metrics != "" {
		after, err := scrape(ctx, r.metrics)
		if err != nil {
			return set, err
		}
		set.Calls = delta(before, after)
	}
	r.trk.mu.Lock()
	defer r.trk.mu.Unlock()
	for i, tr := range set.Traces {
		c := *tr
		set.Traces[i] = &c // a copy the watch no longer writes
	}
	return set, nil
}

// create makes t's claim and its pod, as a user applies both.
func (r *run) create(ctx context.Context, t *trace) error {
	labels := map[string]string{"app": "podtime", "class": t.Class}
	class := t.Class
	claim := &v1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: t.Claim, Labels: labels},
		Spec: v1.PersistentVolumeClaimSpec{
			StorageClassName: &class,
			AccessModes:      []v1.PersistentVolumeAccessMode{v1.ReadWriteOnce},
			Resources:        v1.VolumeResourceRequirements{Requests: v1.ResourceList{v1.ResourceStorage: resource.MustParse("1Gi")}},
		},
	}
	zero := int64(0)
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: t.Claim, Labels: labels},
		Spec: v1.PodSpec{
			TerminationGracePeriodSeconds: &zero,
			Containers: []v1.Container{{
				Name: "c", Image: r.image, ImagePullPolicy: v1.PullIfNotPresent,
				Command:      []string{"sleep", "3600"},
				VolumeMounts: []v1.VolumeMount{{Name: "data", MountPath: "/data"}},
			}},
			Volumes: []v1.Volume{{Name: "data", VolumeSource: v1.VolumeSource{
				PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: t.Claim}}}},
		},
	}
	r.trk.mu.Lock()
	t.Created = time.Now()
	r.trk.mu.Unlock()
	c, err := r.cs.CoreV1().PersistentVolumeClaims(r.ns).Create(ctx, claim, metav1.CreateOptions{})
	if err != nil {
		return err
	}
	r.trk.setUID(t, string(c.UID))
	_, err = r.cs.CoreV1().Pods(r.ns).Create(ctx, pod, metav1.CreateOptions{})
	return err
}
