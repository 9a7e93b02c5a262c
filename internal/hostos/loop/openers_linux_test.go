package loop_test

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/filevol/filevol/internal/hostos/loop"
)

// A detach of a device that a process holds open only marks it; Holders
// then names that process (its pid and command), and nothing once it is
// gone.
func TestHoldersNamesTheProcessHoldingADevice(t *testing.T) {
	dir := setup(t)
	d := mustAttach(t, newImage(t, dir, "held.img", 1<<20), loop.Options{})
	// A child with the device open as its standard input, as a pod's
	// process holding a block volume would.
	f, err := os.Open(d.Path)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("sleep", "60")
	cmd.Stdin = f
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	t.Cleanup(func() { _ = cmd.Process.Kill(); _, _ = cmd.Process.Wait() })

	want := fmt.Sprintf("open by pid %d (sleep)", cmd.Process.Pid)
	if err := loop.Detach(d.Path); !errors.Is(err, loop.ErrBusy) || !strings.Contains(err.Error(), want) {
		t.Errorf("Detach of a held device: %v, want ErrBusy naming %q", err, want)
	}
	if got := loop.Holders(d.Path); !strings.Contains(got, want) {
		t.Errorf("Holders(%s) = %q, want it to name %q", d.Path, got, want)
	}
	_ = cmd.Process.Kill()
	_, _ = cmd.Process.Wait()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := loop.Holders(d.Path)
		if !strings.Contains(got, "open by") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Holders still names a holder after it exited: %q", got)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
