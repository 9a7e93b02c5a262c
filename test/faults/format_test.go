package faults

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/filevol/filevol/internal/testutil"
)

var diagFlag = flag.Bool("diag", false, "TestKillDuringFormat: show what holds the device when a retried stage fails")

// TestKillDuringFormat kills the driver while NodeStageVolume formats a new
// volume (mkfs runs for tens of milliseconds), at a range of delays, then
// restarts it and retries the stage as kubelet does. A half-made
// filesystem must never make the volume unstageable: the retried stage
// must format it again or mount what is there, and the volume must be
// writable.
func TestKillDuringFormat(t *testing.T) {
	testutil.RequireRoot(t)
	dir := testutil.Scratch(t, "faults")
	t.Cleanup(func() { thawUnder(dir) })
	bin := buildDriver(t)
	st := newStats()
	p := newProc(t, bin, dir)
	if err := p.start(); err != nil {
		t.Fatal(err)
	}
	o := &ops{p: p, st: st}
	n := 0
	for _, kind := range []string{"ext4", "xfs", "btrfs"} {
		for _, delay := range []time.Duration{1, 3, 6, 10, 15, 25, 40, 70} {
			delay *= time.Millisecond
			n++
			v := newVolume(dir, fmt.Sprintf("format-%d", n), kind)
			if kind == "btrfs" {
				v.size = 128 << 20
			}
			if err := o.create(v, nil); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
				defer cancel()
				_, err := p.node.NodeStageVolume(ctx, &csipb.NodeStageVolumeRequest{VolumeId: v.id, StagingTargetPath: v.staging, VolumeCapability: v.capability()})
				done <- err
			}()
			time.Sleep(delay)
			p.kill()
			first := <-done
			if err := p.start(); err != nil {
				t.Fatal(err)
			}
			err := o.stage(v)
			if err == nil {
				err = o.publish(v)
			}
			if err == nil {
				err = o.write(v, rand.New(rand.NewPCG(uint64(n), 7)))
			}
			if err == nil {
				err = o.unpublishAndUnstage(v)
			}
			if err == nil {
				err = o.stageAndPublish(v)
			}
			if err == nil {
				err = o.verify(v)
			}
			if err != nil && *diagFlag {
				out, _ := exec.Command("sh", "-c", "losetup -a | grep "+v.id+"; for d in $(losetup -j "+p.pool+"/volumes/"+v.id+".img -O NAME -n); do b=$(basename $d); echo $d holders: $(ls /sys/block/$b/holders); blkid -p $d; grep -w $d /proc/self/mountinfo; done; ps -eo pid,pgid,stat,comm | grep -i mkfs").CombinedOutput()
				t.Logf("diagnosis:\n%s", out)
			}
			if err != nil {
				t.Errorf("%s killed %s into its first stage (answered %s): %v", v, delay, describe(first), err)
			} else {
				t.Logf("%s killed %s into its first stage (answered %s): staged, written and verified after the restart", v, delay, describe(first))
			}
			_ = o.unpublishAndUnstage(v)
			_ = o.delete(v)
		}
	}
	for _, b := range checkInvariants(context.Background(), p, features{}, state{volumes: map[string]*volume{}}) {
		t.Errorf("at the end: %s", b)
	}
}
