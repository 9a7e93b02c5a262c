package app

import (
	"context"
	"testing"

	"github.com/filevol/filevol/internal/nodeview/api"
	"github.com/filevol/filevol/internal/volume"
)

// A directory volume's unenforced size is not a condition of the node
// view (its context and doctor say it); every other condition is.
func TestDirVolumeHealthLeavesOutTheUnenforcedSize(t *testing.T) {
	all := func(context.Context, string, string, string) ([]api.Condition, error) {
		return []api.Condition{{Reason: volume.ReasonSizeNotEnforced}, {Reason: volume.ReasonQuotaEscapeRepaired}}, nil
	}
	got, err := dirVolumeHealth(all)(context.Background(), "fv1-dir-0000000a-01", "", "")
	if err != nil || len(got) != 1 || got[0].Reason != volume.ReasonQuotaEscapeRepaired {
		t.Errorf("dirVolumeHealth = %+v, %v; want the quota escape alone", got, err)
	}
}
