package kubesim

import (
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestIsFencingRefusal(t *testing.T) {
	refusal := "node node-a still holds the image of volume v1 open for writing through its loop device"
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{status.Error(codes.FailedPrecondition, refusal), true},
		{nil, false},
		{status.Error(codes.FailedPrecondition, "volume v1 is attached to node node-a"), false}, // Multi-Attach, not fencing
		{status.Error(codes.Unavailable, refusal), false},
	} {
		if got := IsFencingRefusal(tc.err); got != tc.want {
			t.Errorf("IsFencingRefusal(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

func TestCapabilities(t *testing.T) {
	if b := BlockCapability(); b.GetBlock() == nil || b.GetAccessMode().GetMode().String() != "SINGLE_NODE_WRITER" {
		t.Errorf("BlockCapability() = %v", b)
	}
	if m := FilesystemCapability("xfs"); m.GetMount().GetFsType() != "xfs" || m.GetAccessMode().GetMode().String() != "SINGLE_NODE_WRITER" {
		t.Errorf("FilesystemCapability(xfs) = %v", m)
	}
	if BlockCapability() == BlockCapability() {
		t.Error("BlockCapability returns one shared value: a test that changed it would change every other's")
	}
}
