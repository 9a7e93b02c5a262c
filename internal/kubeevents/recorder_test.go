package kubeevents

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"
)

// fakeAPIServer serves the three calls the recorder makes and records them.
type fakeAPIServer struct {
	mu      sync.Mutex
	created []corev1.Event
	patches []string
}

func (f *fakeAPIServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	switch {
	case r.Method == http.MethodGet && r.URL.Path == "/api/v1/persistentvolumes/pv-1":
		io.WriteString(w, `{"kind":"PersistentVolume","apiVersion":"v1","metadata":{"name":"pv-1","uid":"uid-pv-1"}}`)
	case r.Method == http.MethodGet && r.URL.Path == "/api/v1/nodes/n1":
		io.WriteString(w, `{"kind":"Node","apiVersion":"v1","metadata":{"name":"n1","uid":"uid-n1"}}`)
	case r.Method == http.MethodPost && r.URL.Path == "/api/v1/namespaces/default/events":
		var ev corev1.Event
		if err := json.NewDecoder(r.Body).Decode(&ev); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		ev.Name = ev.GenerateName + "abcde"
		f.created = append(f.created, ev)
		json.NewEncoder(w).Encode(ev)
	case r.Method == http.MethodPatch && strings.HasPrefix(r.URL.Path, "/api/v1/namespaces/default/events/"):
		b, _ := io.ReadAll(r.Body)
		f.patches = append(f.patches, strings.TrimPrefix(r.URL.Path, "/api/v1/namespaces/default/events/")+" "+string(b))
		io.WriteString(w, `{"kind":"Event","apiVersion":"v1","metadata":{"name":"x"}}`)
	default:
		w.WriteHeader(http.StatusNotFound)
		io.WriteString(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotFound","code":404}`)
	}
}

func TestRecorderOverREST(t *testing.T) {
	f := &fakeAPIServer{}
	srv := httptest.NewServer(f)
	defer srv.Close()
	rec, err := New(&rest.Config{Host: srv.URL}, Config{Driver: "filevol.csi.io", Node: "n1", Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	clock := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	rec.now = func() time.Time { return clock }
	ctx := context.Background()
	abnormal := Event{Kind: KindPV, Name: "pv-1", Type: Warning, Reason: "VolumeConditionAbnormal", Message: "ImageMissing"}
	full := Event{Kind: KindNode, Name: "n1", Type: Warning, Reason: "PoolNearlyFull", Message: "2% free"}

	for _, step := range []struct {
		ev      Event
		advance time.Duration
	}{
		{abnormal, 0},
		{abnormal, time.Minute},     // within repeatAfter: counted, not sent
		{abnormal, 5 * time.Minute}, // sent as a count patch (1 + 1 pending + 1)
		{full, 0},
	} {
		clock = clock.Add(step.advance)
		if err := rec.send(ctx, step.ev); err != nil {
			t.Fatalf("send %s: %v", step.ev.Reason, err)
		}
	}
	if err := rec.send(ctx, Event{Kind: KindPV, Name: "gone", Type: Warning, Reason: "X", Message: "y"}); err == nil {
		t.Error("an event about a PV that does not exist was sent")
	}

	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.created) != 2 {
		t.Fatalf("created %d events, want 2: %+v", len(f.created), f.created)
	}
	e := f.created[0]
	if e.InvolvedObject.Kind != "PersistentVolume" || e.InvolvedObject.Name != "pv-1" || e.InvolvedObject.UID != "uid-pv-1" ||
		e.Namespace != "default" || e.Type != "Warning" || e.Reason != "VolumeConditionAbnormal" ||
		e.ReportingController != "filevol.csi.io" || e.ReportingInstance != "n1" || e.Source.Component != "filevol" || e.Count != 1 {
		t.Errorf("PV event = %+v", e)
	}
	if n := f.created[1]; n.InvolvedObject.Kind != "Node" || n.InvolvedObject.UID != "uid-n1" {
		t.Errorf("node event = %+v", n)
	}
	if len(f.patches) != 1 || !strings.HasPrefix(f.patches[0], "pv-1.abcde ") || !strings.Contains(f.patches[0], `"count":3`) {
		t.Errorf("patches = %q, want one raising pv-1.abcde to count 3", f.patches)
	}
}

func TestNilRecorderIgnoresEvents(t *testing.T) {
	var r *Recorder
	r.Emit(Event{Kind: KindNode, Name: "n1"}) // must not panic
	rec, err := New(nil, Config{})
	if rec != nil || err != nil {
		t.Errorf("New(nil) = %v, %v; want nil, nil", rec, err)
	}
}

func TestRESTConfigOffOutsideACluster(t *testing.T) {
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	cfg, err := RESTConfig("")
	if cfg != nil || err != nil {
		t.Errorf("RESTConfig(\"\") = %v, %v; want nil, nil", cfg, err)
	}
	if _, err := RESTConfig("/nonexistent/kubeconfig"); err == nil {
		t.Error("a missing --kubeconfig file was accepted")
	}
}

func TestEmitDropsWhenFull(t *testing.T) {
	r := newRecorder(nil, Config{})
	for range queueSize + 10 {
		r.Emit(Event{Kind: KindNode, Name: "n1"}) // never blocks
	}
	if len(r.queue) != queueSize {
		t.Errorf("queue holds %d, want %d", len(r.queue), queueSize)
	}
}
