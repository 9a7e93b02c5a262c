package kubectlplugin

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/filevol/filevol/internal/nodeview/api"
)

// loadOptions selects what load reads.
type loadOptions struct {
	driver, driverSelector, driverNamespace string
	now                                     time.Time
	grace                                   time.Duration
	// dynamic reads velero's data movers; nil leaves them out.
	dynamic dynamic.Interface
}

// load reads the cluster. A resource that cannot be listed (forbidden, or
// an API the cluster does not serve) becomes a note, not a failure; only
// PersistentVolumes are required.
func load(ctx context.Context, cs kubernetes.Interface, o loadOptions) (*cluster, error) {
	c := &cluster{driver: o.driver, now: o.now, grace: o.grace, classes: map[string]storagev1.StorageClass{},
		nodes: map[string]corev1.Node{}, csiNodes: map[string]storagev1.CSINode{},
		views: map[string]*api.Report{}, viewErrs: map[string]error{}}
	all := metav1.ListOptions{}
	pvs, err := cs.CoreV1().PersistentVolumes().List(ctx, all)
	if err != nil {
		return nil, fmt.Errorf("list PersistentVolumes: %w", err)
	}
	for _, pv := range pvs.Items {
		if pv.Spec.CSI != nil && pv.Spec.CSI.Driver == o.driver {
			c.pvs = append(c.pvs, pv)
		}
	}
	slices.SortFunc(c.pvs, func(a, b corev1.PersistentVolume) int { return strings.Compare(a.Name, b.Name) })
	// listed reports whether a List answered; when it did not, a note says
	// what could not be listed and why.
	listed := func(what string, err error) bool {
		if err != nil {
			c.notes = append(c.notes, fmt.Sprintf("could not list %s: %v", what, err))
		}
		return err == nil
	}
	if d, err := cs.StorageV1().CSIDrivers().Get(ctx, o.driver, metav1.GetOptions{}); err == nil {
		c.csiDriver = d
	} else if !apierrors.IsNotFound(err) {
		listed("CSIDrivers", err)
	}
	if l, err := cs.CoreV1().PersistentVolumeClaims("").List(ctx, all); listed("PersistentVolumeClaims", err) {
		c.pvcs = l.Items
	}
	if l, err := cs.StorageV1().StorageClasses().List(ctx, all); listed("StorageClasses", err) {
		c.classes = byName(l.Items)
	}
	if l, err := cs.StorageV1().VolumeAttachments().List(ctx, all); listed("VolumeAttachments", err) {
		for _, va := range l.Items {
			if va.Spec.Attacher == o.driver {
				c.vas = append(c.vas, va)
			}
		}
	}
	if l, err := cs.CoreV1().Nodes().List(ctx, all); listed("Nodes", err) {
		c.nodes = byName(l.Items)
	}
	if l, err := cs.StorageV1().CSINodes().List(ctx, all); listed("CSINodes", err) {
		c.csiNodes = byName(l.Items)
	}
	if l, err := cs.CoreV1().Pods("").List(ctx, all); listed("Pods", err) {
		c.pods = l.Items
	}
	if l, err := cs.CoreV1().Events("").List(ctx, all); listed("Events", err) {
		c.events = l.Items
	}
	if l, err := cs.StorageV1().CSIStorageCapacities("").List(ctx, all); listed("CSIStorageCapacities", err) {
		c.capacities = l.Items
	}
	if o.driverSelector != "" {
		l, err := cs.CoreV1().Pods(o.driverNamespace).List(ctx, metav1.ListOptions{LabelSelector: o.driverSelector})
		if listed("driver pods", err) {
			c.driverPods = l.Items
		}
	}
	if o.dynamic != nil {
		loadDataMovers(ctx, o.dynamic, c)
	}
	return c, nil
}

// byName indexes listed objects by their names.
func byName[T any, PT interface {
	*T
	GetName() string
}](items []T) map[string]T {
	m := make(map[string]T, len(items))
	for i := range items {
		m[PT(&items[i]).GetName()] = items[i]
	}
	return m
}
