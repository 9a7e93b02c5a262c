package registration

import (
	"context"
	"path/filepath"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	regapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// TestKubeletHandshake plays kubelet's plugin watcher against the server:
// GetInfo, then a refusal, then a success.
func TestKubeletHandshake(t *testing.T) {
	dir := t.TempDir()
	srv, stop, err := Start(dir, "filevol.csi.io", "/var/lib/kubelet/plugins/filevol.csi.io/csi.sock")
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	conn, err := grpc.NewClient("unix://"+SocketPath(dir, "filevol.csi.io"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := regapi.NewRegistrationClient(conn)
	info, err := c.GetInfo(context.Background(), &regapi.InfoRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if info.Type != regapi.CSIPlugin || info.Name != "filevol.csi.io" ||
		info.Endpoint != "/var/lib/kubelet/plugins/filevol.csi.io/csi.sock" || len(info.SupportedVersions) == 0 {
		t.Fatalf("GetInfo = %+v", info)
	}
	if srv.Registered() {
		t.Fatal("registered before kubelet said so")
	}
	if _, err := c.NotifyRegistrationStatus(context.Background(), &regapi.RegistrationStatus{PluginRegistered: false, Error: "version mismatch"}); err != nil {
		t.Fatal(err)
	}
	if srv.Healthy() == nil || srv.Registered() {
		t.Fatal("a refusal must make the server unhealthy")
	}
	if _, err := c.NotifyRegistrationStatus(context.Background(), &regapi.RegistrationStatus{PluginRegistered: true}); err != nil {
		t.Fatal(err)
	}
	if srv.Healthy() != nil || !srv.Registered() {
		t.Fatal("registration success not recorded")
	}
	stop()
	if m, _ := filepath.Glob(filepath.Join(dir, "*")); len(m) != 0 {
		t.Fatalf("socket left after stop: %v", m)
	}
}
