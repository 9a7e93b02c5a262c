package ctl

import (
	"context"
	"flag"
	"fmt"
	"strings"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/filevol/filevol/internal/options"
)

var commands = map[string]func(context.Context, client, []string) error{
	"info":      info,
	"create":    create,
	"list":      list,
	"get":       get,
	"stage":     stage,
	"publish":   publish,
	"stats":     stats,
	"unpublish": unpublish,
	"unstage":   unstage,
	"delete":    del,
}

func info(ctx context.Context, c client, args []string) error {
	pi, err := c.id.GetPluginInfo(ctx, &csipb.GetPluginInfoRequest{})
	if err != nil {
		return err
	}
	c.print(pi)
	if ni, err := c.node.NodeGetInfo(ctx, &csipb.NodeGetInfoRequest{}); err == nil {
		c.print(ni)
	}
	if gc, err := c.ctrl.GetCapacity(ctx, &csipb.GetCapacityRequest{}); err == nil {
		c.print(gc)
	}
	return nil
}

type kv map[string]string

func (m kv) String() string { return fmt.Sprint(map[string]string(m)) }
func (m kv) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok {
		return fmt.Errorf("--param %q: want key=value", s)
	}
	m[k] = v
	return nil
}

func create(ctx context.Context, c client, args []string) error {
	fs := flag.NewFlagSet("create", flag.ContinueOnError)
	size := options.Quantity(1 << 30)
	fs.Var(&size, "size", "capacity (e.g. 1Gi)")
	fsType := fs.String("fstype", "", "filesystem (ext4 default, xfs, btrfs)")
	block := fs.Bool("block", false, "raw block volume")
	params := kv{}
	fs.Var(params, "param", "StorageClass parameter key=value (repeatable)")
	name, err := parse(fs, args, true)
	if err != nil {
		return err
	}
	return c.printed(c.ctrl.CreateVolume(ctx, &csipb.CreateVolumeRequest{
		Name:               name,
		CapacityRange:      &csipb.CapacityRange{RequiredBytes: int64(size)},
		VolumeCapabilities: []*csipb.VolumeCapability{capability(*block, false, *fsType)},
		Parameters:         params,
	}))
}

func list(ctx context.Context, c client, args []string) error {
	token := ""
	for {
		resp, err := c.ctrl.ListVolumes(ctx, &csipb.ListVolumesRequest{StartingToken: token, MaxEntries: 100})
		if err != nil {
			return err
		}
		c.print(resp)
		if token = resp.GetNextToken(); token == "" {
			return nil
		}
	}
}

func get(ctx context.Context, c client, args []string) error {
	id, err := parse(flag.NewFlagSet("get", flag.ContinueOnError), args, true)
	if err != nil {
		return err
	}
	return c.printed(c.ctrl.ControllerGetVolume(ctx, &csipb.ControllerGetVolumeRequest{VolumeId: id}))
}

func stage(ctx context.Context, c client, args []string) error {
	fs := flag.NewFlagSet("stage", flag.ContinueOnError)
	staging := fs.String("staging", "", "staging directory")
	block := fs.Bool("block", false, "raw block volume")
	ro := fs.Bool("ro", false, "read-only access mode")
	id, err := parse(fs, args, true)
	if err != nil {
		return err
	}
	_, err = c.node.NodeStageVolume(ctx, &csipb.NodeStageVolumeRequest{
		VolumeId: id, StagingTargetPath: *staging, VolumeCapability: capability(*block, *ro, ""),
	})
	return c.did(err, "staged %s at %s\n", id, *staging)
}

func publish(ctx context.Context, c client, args []string) error {
	fs := flag.NewFlagSet("publish", flag.ContinueOnError)
	staging := fs.String("staging", "", "staging directory")
	target := fs.String("target", "", "target directory (file for --block)")
	block := fs.Bool("block", false, "raw block volume")
	ro := fs.Bool("ro", false, "publish read-only")
	id, err := parse(fs, args, true)
	if err != nil {
		return err
	}
	_, err = c.node.NodePublishVolume(ctx, &csipb.NodePublishVolumeRequest{
		VolumeId: id, StagingTargetPath: *staging, TargetPath: *target,
		VolumeCapability: capability(*block, false, ""), Readonly: *ro,
	})
	return c.did(err, "published %s at %s\n", id, *target)
}

func stats(ctx context.Context, c client, args []string) error {
	id, path, err := parseWithPath("stats", "path", "published or staged path", args)
	if err != nil {
		return err
	}
	return c.printed(c.node.NodeGetVolumeStats(ctx, &csipb.NodeGetVolumeStatsRequest{VolumeId: id, VolumePath: path}))
}

func unpublish(ctx context.Context, c client, args []string) error {
	id, target, err := parseWithPath("unpublish", "target", "target path", args)
	if err != nil {
		return err
	}
	_, err = c.node.NodeUnpublishVolume(ctx, &csipb.NodeUnpublishVolumeRequest{VolumeId: id, TargetPath: target})
	return c.did(err, "unpublished %s from %s\n", id, target)
}

func unstage(ctx context.Context, c client, args []string) error {
	id, staging, err := parseWithPath("unstage", "staging", "staging directory", args)
	if err != nil {
		return err
	}
	_, err = c.node.NodeUnstageVolume(ctx, &csipb.NodeUnstageVolumeRequest{VolumeId: id, StagingTargetPath: staging})
	return c.did(err, "unstaged %s from %s\n", id, staging)
}

// parseWithPath parses the arguments of a command that takes a volume ID
// and one path flag, --name (usage says what it is).
func parseWithPath(cmd, name, usage string, args []string) (id, path string, err error) {
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	p := fs.String(name, "", usage)
	id, err = parse(fs, args, true)
	return id, *p, err
}

func del(ctx context.Context, c client, args []string) error {
	id, err := parse(flag.NewFlagSet("delete", flag.ContinueOnError), args, true)
	if err != nil {
		return err
	}
	_, err = c.ctrl.DeleteVolume(ctx, &csipb.DeleteVolumeRequest{VolumeId: id})
	return c.did(err, "deleted %s\n", id)
}
