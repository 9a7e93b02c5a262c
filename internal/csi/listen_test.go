package csi

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestListenSocket: the CSI API has no authentication, so the socket is
// its owner's alone; a stale socket of a killed
// process is replaced, anything else at that path is left alone.
func TestListenSocket(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "plugins", "csi.sock")

	// A stale socket, as a SIGKILLed driver leaves it.
	if err := os.MkdirAll(filepath.Dir(sock), 0o750); err != nil {
		t.Fatal(err)
	}
	stale, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	stale.(*net.UnixListener).SetUnlinkOnClose(false)
	stale.Close()

	lis, err := Listen("unix://" + sock)
	if err != nil {
		t.Fatalf("Listen over a stale socket: %v", err)
	}
	defer lis.Close()
	st, err := os.Stat(sock)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode()&os.ModeSocket == 0 || st.Mode().Perm() != 0o600 {
		t.Errorf("socket mode %v, want a socket with 0600", st.Mode())
	}

	regular := filepath.Join(dir, "not-a-socket")
	if err := os.WriteFile(regular, []byte("data"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Listen("unix://" + regular); err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Errorf("Listen over a regular file: %v, want a refusal", err)
	}
	if data, err := os.ReadFile(regular); err != nil || string(data) != "data" {
		t.Errorf("the regular file was touched: %q, %v", data, err)
	}
}
