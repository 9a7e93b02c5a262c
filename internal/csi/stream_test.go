package csi

import (
	"context"
	"errors"
	"io"
	"path/filepath"
	"sync"
	"testing"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/filevol/filevol/internal/volume"
)

type recordingObserver struct {
	mu    sync.Mutex
	calls []string
}

func (o *recordingObserver) ObserveCall(method, code string, _ time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.calls = append(o.calls, method+" "+code)
}

// A server-streaming call goes through the same error map and metrics as
// a unary one: the backend's sentinel reaches the client as its code,
// after the messages sent before it, and the observer sees the outcome.
func TestStreamsShareTheErrorMapAndMetrics(t *testing.T) {
	obs := &recordingObserver{}
	srv := NewGRPCServer(obs)
	srv.RegisterService(&grpc.ServiceDesc{
		ServiceName: "test.Items", HandlerType: (*any)(nil),
		Streams: []grpc.StreamDesc{{StreamName: "List", ServerStreams: true, Handler: func(_ any, ss grpc.ServerStream) error {
			var req csipb.NodeStageVolumeRequest
			if err := ss.RecvMsg(&req); err != nil {
				return err
			}
			for range 2 {
				if err := ss.SendMsg(&csipb.NodeStageVolumeResponse{}); err != nil {
					return err
				}
			}
			return volume.ErrNotFound
		}}},
	}, struct{}{})
	lis, err := Listen("unix://" + filepath.Join(t.TempDir(), "csi.sock"))
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()
	conn, err := grpc.NewClient("unix://"+lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cs, err := conn.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true}, "/test.Items/List")
	if err != nil {
		t.Fatal(err)
	}
	if err := cs.SendMsg(&csipb.NodeStageVolumeRequest{VolumeId: "v", Secrets: map[string]string{"key": "hidden"}}); err != nil {
		t.Fatal(err)
	}
	if err := cs.CloseSend(); err != nil {
		t.Fatal(err)
	}
	got := 0
	for {
		var resp csipb.NodeStageVolumeResponse
		err = cs.RecvMsg(&resp)
		if err != nil {
			break
		}
		got++
	}
	if got != 2 || errors.Is(err, io.EOF) || status.Code(err) != codes.NotFound {
		t.Fatalf("received %d messages, then %v; want 2, then NotFound (the error map)", got, err)
	}
	srv.GracefulStop()
	obs.mu.Lock()
	defer obs.mu.Unlock()
	if len(obs.calls) != 1 || obs.calls[0] != "/test.Items/List NotFound" {
		t.Errorf("observed %v, want the stream's outcome once", obs.calls)
	}
}
