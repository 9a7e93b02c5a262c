package csi

import (
	"github.com/filevol/filevol/internal/dirpool"
	"github.com/filevol/filevol/internal/dirpool/dirnode"
	"github.com/filevol/filevol/internal/pool"
	"github.com/filevol/filevol/internal/pool/imagenode"
)

// The kinds filevol serves implement the halves the services route to,
// and the optional parts the services look for; the services import
// neither (internal/app wires them).
var (
	_ VolumeStore   = (*pool.Pool)(nil)
	_ GroupStore    = (*pool.Pool)(nil)
	_ NodeBackend   = (*imagenode.Node)(nil)
	_ freezePointer = (*imagenode.Node)(nil)
	_ stagedFinder  = (*imagenode.Node)(nil)
	_ listingFinder = (*imagenode.Node)(nil)
	_ collector     = (*imagenode.Node)(nil)
	_ ioUsers       = (*imagenode.Node)(nil)
	_ VolumeStore   = (*dirpool.Pool)(nil)
	_ NodeBackend   = (*dirnode.Node)(nil)
)
