package loop_test

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/filevol/filevol/internal/hostos/loop"
)

// TestAttachSelectsScheduler: Options.Scheduler is the scheduler of the
// attached device's queue, whatever the last user of that device number
// left there (the kernel keeps a queue's scheduler across detach and
// attach: the second attach usually gets the number the first freed).
func TestAttachSelectsScheduler(t *testing.T) {
	dir := setup(t)
	img := newImage(t, dir, "sched.img", 8<<20)
	first := mustAttach(t, img, loop.Options{DirectIO: true, Scheduler: "mq-deadline"})
	if s, err := loop.Scheduler(first); err != nil || s != "mq-deadline" {
		t.Fatalf("scheduler of a device attached with mq-deadline = %q, %v", s, err)
	}
	if err := loop.Detach(first.Path); err != nil {
		t.Fatal(err)
	}
	second := mustAttach(t, img, loop.Options{DirectIO: true, Scheduler: "none"})
	if s, err := loop.Scheduler(second); err != nil || s != "none" {
		t.Fatalf("scheduler of a device attached with none (number %d, the first was %d) = %q, %v", second.Number, first.Number, s, err)
	}
	if second.Number != first.Number {
		// Put the kernel's default back on the number we left mq-deadline
		// on, unless another user has it by now.
		base := filepath.Join("/sys/block", "loop"+strconv.Itoa(first.Number))
		if _, err := os.Stat(filepath.Join(base, "loop", "backing_file")); os.IsNotExist(err) {
			_ = os.WriteFile(filepath.Join(base, "queue", "scheduler"), []byte("none"), 0)
		}
	}
}
