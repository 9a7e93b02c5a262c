package app

import (
	"context"
	"fmt"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"k8s.io/klog/v2"

	"github.com/filevol/filevol/internal/csi"
	"github.com/filevol/filevol/internal/kubeevents"
	"github.com/filevol/filevol/internal/monitor"
	"github.com/filevol/filevol/internal/nodeview"
	"github.com/filevol/filevol/internal/nodeview/api"
	"github.com/filevol/filevol/internal/options"
	"github.com/filevol/filevol/internal/version"
	"github.com/filevol/filevol/internal/volume"
)

// dirVolumeHealth is volumeHealth for directory volumes, without the
// unenforced size: the volume's context and doctor already say that, and
// it is a choice of the class, not a condition to warn of again.
func dirVolumeHealth(health nodeview.HealthFunc) nodeview.HealthFunc {
	return func(ctx context.Context, id, staging, target string) ([]api.Condition, error) {
		conds, err := health(ctx, id, staging, target)
		out := conds[:0]
		for _, c := range conds {
			if c.Reason != volume.ReasonSizeNotEnforced {
				out = append(out, c)
			}
		}
		return out, err
	}
}

// volumeHealth gives the node view the driver's own health RPCs, so
// /debug/volumes, Events and NodeGetVolumeHealth never disagree. A
// controller-only process knows the pool side only.
func volumeHealth(d *csi.Driver) nodeview.HealthFunc {
	return func(ctx context.Context, id, staging, target string) ([]api.Condition, error) {
		var entries []*csipb.VolumeHealth_VolumeHealthEntry
		switch {
		case d.Node != nil:
			r, err := d.Node.NodeGetVolumeHealth(ctx, &csipb.NodeGetVolumeHealthRequest{
				VolumeId: id, StagingTargetPath: staging, VolumePublishPath: target})
			if err != nil {
				return nil, err
			}
			entries = r.GetVolumeHealth().GetHealthStatuses()
		case d.Controller != nil:
			r, err := d.Controller.ControllerGetVolumeHealth(ctx, &csipb.ControllerGetVolumeHealthRequest{VolumeId: id})
			if err != nil {
				return nil, err
			}
			entries = r.GetVolumeHealth().GetHealthStatuses()
		}
		out := make([]api.Condition, 0, len(entries))
		for _, e := range entries {
			out = append(out, api.Condition{Status: e.GetStatus().String(), Reason: e.GetReason(), Message: e.GetMessage()})
		}
		return out, nil
	}
}

// startEvents starts the event recorder and the monitor when an API server
// is configured. An explicit --kubeconfig that does not work is an error;
// no API server at all just means no events (the driver needs none).
func startEvents(ctx context.Context, o options.Options, view *nodeview.Builder) error {
	cfg, err := kubeevents.RESTConfig(o.Kubeconfig)
	if err != nil {
		if o.Kubeconfig != "" {
			return err
		}
		klog.ErrorS(err, "no API server: Kubernetes Events are off")
		return nil
	}
	if cfg == nil {
		klog.V(2).InfoS("no --kubeconfig and not in a pod: Kubernetes Events are off")
		return nil
	}
	rec, err := kubeevents.New(cfg, kubeevents.Config{Driver: o.DriverName, Node: o.NodeID, Version: version.Version})
	if err != nil {
		return fmt.Errorf("events: %w", err)
	}
	go rec.Run(ctx)
	klog.InfoS("reporting Kubernetes Events", "server", cfg.Host, "monitorInterval", o.MonitorInterval)
	if o.MonitorInterval > 0 {
		go monitor.New(o.NodeID, view, sink{rec}).Run(ctx, o.MonitorInterval)
	}
	return nil
}

// sink hands the monitor's events to the recorder.
type sink struct{ r *kubeevents.Recorder }

func (s sink) Emit(e monitor.Event) {
	s.r.Emit(kubeevents.Event{Kind: e.Kind, Name: e.Name, Type: e.Type, Reason: e.Reason, Message: e.Message})
}
