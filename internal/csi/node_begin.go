package csi

import csipb "github.com/container-storage-interface/spec/lib/go/csi"

// pathArg is a path of a node request that begin checks: under the path
// policy (checked, cleaned in place), or only for presence (present: a
// call that checks it later, after telling a missing volume apart).
type pathArg struct {
	what     string
	p        *string
	presence bool
}

func checked(what string, p *string) pathArg { return pathArg{what: what, p: p} }
func present(what string, p *string) pathArg { return pathArg{what: what, p: p, presence: true} }

// begin is the start every node call that acts on a volume shares. In
// this order: a missing volume ID (INVALID_ARGUMENT), each path, the
// capability (required, or only checked when given), the ID's shape
// (NOT_FOUND: no volume can have a malformed ID) and its route (NOT_FOUND:
// no volume of a pool or kind this node does not serve is here); then it
// takes the volume's lock (ABORTED while another call holds it). It
// returns the volume's backend, the capability's fs type and the unlock
// function.
func (s *NodeService) begin(id string, c *csipb.VolumeCapability, capRequired bool, paths ...pathArg) (*nodeVolumes, string, func(), error) {
	if id == "" {
		return nil, "", nil, invalidArgument("volume ID is missing")
	}
	for _, a := range paths {
		if a.presence {
			if *a.p == "" {
				return nil, "", nil, invalidArgument("%s is missing", a.what)
			}
			continue
		}
		p, err := s.paths.check(a.what, *a.p)
		if err != nil {
			return nil, "", nil, err
		}
		*a.p = p
	}
	var fsType string
	if c != nil || capRequired {
		t, err := checkCapability(c)
		if err != nil {
			return nil, "", nil, err
		}
		fsType = t
	}
	nv, err := s.vols.volume(id)
	if err != nil {
		return nil, "", nil, err
	}
	if c != nil && multiNode(c) {
		if !nv.Traits().MultiNode {
			return nil, "", nil, errImageSingleNode(c)
		}
		if !s.cfg.Shared {
			return nil, "", nil, invalidArgument("access mode %s: this node's directory pool is node-local; MULTI_NODE_* needs --pool-shared", c.GetAccessMode().GetMode())
		}
	}
	// The volume's freeze key too: no node call runs while the freeze
	// agent holds the volume's filesystem frozen (node_freeze.go).
	unlock, err := s.locks.tryLock(id, frozenKey(id))
	if err != nil {
		return nil, "", nil, err
	}
	return nv, fsType, unlock, nil
}
