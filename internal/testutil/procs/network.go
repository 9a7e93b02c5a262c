package procs

import (
	"errors"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/filevol/filevol/internal/testutil"
)

// Bridge makes the server's side of a harness's network in the namespace
// ns (already made): lo up, and a bridge br0 with the address addr/24 that
// the nodes' links join. The bridge gets the fixed MAC mac because a bridge
// without one takes its lowest port's: removing that port (a node's
// teardown) would change it under the other nodes' ARP caches, and their
// packets to the server were then lost for 7-27 s.
func Bridge(ns, addr, mac string) error {
	return ipSteps([][]string{
		{"-n", ns, "link", "set", "lo", "up"},
		{"-n", ns, "link", "add", "br0", "address", mac, "type", "bridge"},
		{"-n", ns, "addr", "add", addr + "/24", "dev", "br0"},
		{"-n", ns, "link", "set", "br0", "up"},
	})
}

// Link is a simulated node's place on a harness's network: the node's own
// network namespace NS, joined by a veth pair (eth0 inside it) to the
// bridge br0 that Bridge made in the server's namespace SrvNS, where its
// end is named Port; Addr is the node's address on the bridge's /24.
type Link struct{ SrvNS, NS, Port, Addr string }

// NodeLink is the link of the i-th node, called name, of the cluster in
// slot: its namespace is the slot's (Netns), its bridge port p<i> in the
// server's namespace, its address <NetPrefix>.<slot>.<10+i>.
func (s Slots) NodeLink(slot, i int, name string) Link {
	return Link{SrvNS: s.ServerNS(slot), NS: s.Netns(slot, name), Port: fmt.Sprintf("p%d", i),
		Addr: fmt.Sprintf("%s.%d.%d", s.NetPrefix, slot, 10+i)}
}

// Add makes the node's namespace and joins it to the bridge.
func (l Link) Add() error {
	if err := AddNetns(l.NS); err != nil {
		return err
	}
	return ipSteps([][]string{
		{"-n", l.NS, "link", "set", "lo", "up"},
		{"-n", l.SrvNS, "link", "add", l.Port, "type", "veth", "peer", "name", "eth0", "netns", l.NS},
		{"-n", l.SrvNS, "link", "set", l.Port, "master", "br0", "up"},
		{"-n", l.NS, "addr", "add", l.Addr + "/24", "dev", "eth0"},
		{"-n", l.NS, "link", "set", "eth0", "up"},
	})
}

// SetUp brings the node's port on the bridge up, or takes it down: then
// every packet between the node and the server is dropped, both ways, and
// neither side is told.
func (l Link) SetUp(up bool) error {
	state := "down"
	if up {
		state = "up"
	}
	return IP("-n", l.SrvNS, "link", "set", l.Port, state)
}

// Remove tears the node down: its port brought up again (so that nothing
// waits on a cut-off server), what is mounted under mnt unmounted (loop
// devices left on files under it detached), its FUSE client, which the
// unmount ends, killed if it still runs 5 s later, and its namespace
// deleted. client is nil when none was started; done is closed when it
// has ended.
func (l Link) Remove(mnt string, client *os.Process, done <-chan struct{}) error {
	var errs []error
	_ = l.SetUp(true)
	if err := testutil.CleanLeftovers(mnt); err != nil {
		errs = append(errs, err)
	}
	if client != nil {
		select {
		case <-done: // the unmount ended it
		case <-time.After(5 * time.Second):
			_ = client.Signal(unix.SIGKILL)
			<-done
		}
	}
	if err := DelNetns(l.NS); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// ipSteps runs ip(8) once per argument list, in order, up to the first
// failure.
func ipSteps(steps [][]string) error {
	for _, s := range steps {
		if err := IP(s...); err != nil {
			return err
		}
	}
	return nil
}
