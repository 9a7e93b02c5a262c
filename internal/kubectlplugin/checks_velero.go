package kubectlplugin

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
)

// Velero's CSI data mover (velero.io/v2alpha1), read as unstructured
// objects so that the plugin depends on no Velero code. A DataUpload moves
// one CSI snapshot's data to the backup location: velero restores the
// snapshot into a claim named like the DataUpload, in its namespace, and
// starts a data-mover pod on it. A DataDownload restores the other way: a
// claim named like it, of the target claim's StorageClass, written by a
// data-mover pod. While that claim is Pending the backup or restore does not
// move, and velero fails it only after the node-agent's
// --data-mover-prepare-timeout (30m by default).
var (
	dataUploads   = schema.GroupVersionResource{Group: "velero.io", Version: "v2alpha1", Resource: "datauploads"}
	dataDownloads = schema.GroupVersionResource{Group: "velero.io", Version: "v2alpha1", Resource: "datadownloads"}
)

// dataMover is a DataUpload or DataDownload, as much of it as the check reads.
type dataMover struct {
	kind, namespace, name string
	phase                 string
	created               time.Time
	// operation names the Backup or Restore it belongs to (velero's label),
	// verb says which.
	operation, verb string
	// source is the claim the data comes from (DataUpload) or goes to
	// (DataDownload), namespace/name; snapshot the VolumeSnapshot a
	// DataUpload reads.
	source, snapshot string
}

// loadDataMovers lists DataUploads and DataDownloads in every namespace.
// A cluster without Velero serves neither resource: that is no note.
func loadDataMovers(ctx context.Context, dyn dynamic.Interface, c *cluster) {
	for _, r := range []struct {
		gvr  schema.GroupVersionResource
		kind string
	}{{dataUploads, "DataUpload"}, {dataDownloads, "DataDownload"}} {
		l, err := dyn.Resource(r.gvr).Namespace("").List(ctx, metav1.ListOptions{})
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			c.notes = append(c.notes, fmt.Sprintf("could not list velero %s: %v", r.gvr.Resource, err))
			continue
		}
		for _, u := range l.Items {
			c.dataMovers = append(c.dataMovers, toDataMover(r.kind, u))
		}
	}
}

func toDataMover(kind string, u unstructured.Unstructured) dataMover {
	str := func(path ...string) string {
		s, _, _ := unstructured.NestedString(u.Object, path...)
		return s
	}
	m := dataMover{kind: kind, namespace: u.GetNamespace(), name: u.GetName(), phase: str("status", "phase"),
		created: u.GetCreationTimestamp().Time}
	if kind == "DataUpload" {
		m.verb, m.operation = "backup", operation("backup", u.GetLabels()["velero.io/backup-name"])
		m.source = str("spec", "sourceNamespace") + "/" + str("spec", "sourcePVC")
		m.snapshot = str("spec", "csiSnapshot", "volumeSnapshot")
	} else {
		m.verb, m.operation = "restore", operation("restore", u.GetLabels()["velero.io/restore-name"])
		m.source = str("spec", "targetVolume", "namespace") + "/" + str("spec", "targetVolume", "pvc")
	}
	return m
}

func operation(verb, name string) string {
	if name == "" {
		return "a " + verb
	}
	return verb + " " + name
}

// waitingPhases are those in which a data mover waits for its claim and pod
// (InProgress already moves data; the rest are over).
var waitingPhases = []string{"", "New", "Accepted", "Prepared"}

// checkDataMovers names backups and restores that do not move because the
// data mover's claim is Pending on one of the driver's StorageClasses: a
// snapshot whose node cannot hold the backup claim (full, or gone), a
// restore no node has room for, or no provisioner; with what
// checkPendingPVCs found about the claim.
func checkDataMovers(c *cluster) []Finding {
	var out []Finding
	for _, m := range c.dataMovers {
		if !slices.Contains(waitingPhases, m.phase) {
			continue
		}
		pvc := c.pvc(m.namespace, m.name)
		if pvc == nil {
			continue
		}
		claim, ok := c.pendingClaim(pvc)
		if !ok {
			continue
		}
		what := fmt.Sprintf("velero restores VolumeSnapshot %s of claim %s into claim %s/%s (StorageClass %s) for its data-mover pod to read",
			orDash(m.snapshot), m.source, pvc.Namespace, pvc.Name, orDash(className(pvc)))
		fix := claim.Fix
		if m.kind == "DataDownload" {
			what = fmt.Sprintf("velero restores the data of claim %s into claim %s/%s (StorageClass %s), written by its data-mover pod, before it hands the volume to %s",
				m.source, pvc.Namespace, pvc.Name, orDash(className(pvc)), m.source)
		} else if strings.Contains(claim.Cause, "filevol snapshots are node-local") {
			// The data mover was placed away from the snapshot's pool: velero
			// pins it to the source volume's node only for WaitForFirstConsumer
			// classes (GetVolumeTopology).
			fix = fmt.Sprintf("give the backup claim a WaitForFirstConsumer %s StorageClass (the node-agent's backupPVC configuration maps StorageClass %s to it, or leave it unmapped): velero then starts the data mover on the node of the source volume, whose pool holds the snapshot; %s",
				c.driver, orDash(className(pvc)), claim.Fix)
		}
		out = append(out, Finding{Severity: SevError, Kind: m.kind, Namespace: m.namespace, Name: m.name,
			Problem: fmt.Sprintf("%s does not move: %s for %s, its claim %s/%s is Pending", m.operation, orDash(m.phase), age(c.now.Sub(m.created)), pvc.Namespace, pvc.Name),
			Cause:   what + "; the claim: " + claim.Cause,
			Fix:     fix + "\nthe " + m.kind + " goes on by itself once the claim is bound; velero fails it after the node-agent's --data-mover-prepare-timeout (30m by default): then run the " + m.verb + " again"})
	}
	return out
}

// ownedByDataMover reports whether a pod belongs to a DataUpload or
// DataDownload (velero's data-mover pods).
func ownedByDataMover(pods []corev1.Pod) bool {
	for _, p := range pods {
		for _, o := range p.OwnerReferences {
			if o.APIVersion == dataUploads.GroupVersion().String() && (o.Kind == "DataUpload" || o.Kind == "DataDownload") {
				return true
			}
		}
	}
	return false
}
