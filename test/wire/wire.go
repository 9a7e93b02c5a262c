// Package wire captures what crosses a network interface of a test's
// network namespace (a harness's bridge), with an AF_PACKET raw socket
// opened from Go (no tcpdump), and answers two questions about the TCP
// payloads seen: does a text cross in clear, and is what travels on a port
// TLS records. Root only (CAP_NET_RAW, setns).
//
//	c, err := wire.Start("/run/netns/fvgl0-srv", "br0")
//	... traffic ...
//	got := c.Stop()
//	got.Contains([]byte(text)); got.TLS(port)
//
// Only IPv4 over Ethernet is parsed (the harnesses use nothing else).
// Segments are kept in arrival order per direction of each connection;
// retransmissions are kept too, which only repeats bytes.
package wire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"sync"

	"golang.org/x/sys/unix"
)

// maxKeep bounds the payload bytes kept: past it the capture counts what
// it dropped (Result.Dropped), so a search cannot silently miss data.
const maxKeep = 256 << 20

// Flow is one direction of a TCP connection.
type Flow struct {
	Src, Dst         string // IPv4 addresses
	SrcPort, DstPort uint16
}

func (f Flow) String() string {
	return fmt.Sprintf("%s:%d>%s:%d", f.Src, f.SrcPort, f.Dst, f.DstPort)
}

// Capture is a running capture.
type Capture struct {
	fd   int
	done chan struct{}
	stop chan struct{}
	mu   sync.Mutex
	res  Result
	err  error
}

// Result is what a capture saw.
type Result struct {
	// Streams holds each flow's payload bytes, concatenated in arrival
	// order.
	Streams map[Flow][]byte
	// Packets counts the frames read; Bytes the TCP payload bytes kept.
	Packets, Bytes int
	// Dropped counts payload bytes not kept (maxKeep) plus frames the
	// kernel dropped (PACKET_STATISTICS) or truncated: a non-zero value
	// means an absence proves nothing.
	Dropped int
}

// Start opens a raw socket on interface ifname of the network namespace
// at nsPath and reads every frame, both directions, until Stop.
func Start(nsPath, ifname string) (*Capture, error) {
	fd, err := openIn(nsPath, ifname)
	if err != nil {
		return nil, err
	}
	c := &Capture{fd: fd, done: make(chan struct{}), stop: make(chan struct{}), res: Result{Streams: map[Flow][]byte{}}}
	go c.read()
	return c, nil
}

// openIn makes the socket inside the namespace: a socket belongs to the
// namespace of the thread that made it, so the thread enters the
// namespace, makes and binds it, and goes back. A thread that cannot go
// back stays locked, and Go ends it with its goroutine.
func openIn(nsPath, ifname string) (int, error) {
	type answer struct {
		fd  int
		err error
	}
	ch := make(chan answer, 1)
	go func() {
		runtime.LockOSThread()
		fd, back, err := openLocked(nsPath, ifname)
		if back {
			runtime.UnlockOSThread()
		}
		ch <- answer{fd, err}
	}()
	a := <-ch
	return a.fd, a.err
}

// openLocked runs on a locked thread; back reports whether the thread is
// in its own namespace again.
func openLocked(nsPath, ifname string) (fd int, back bool, err error) {
	self, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		return -1, true, err
	}
	defer self.Close()
	target, err := os.Open(nsPath)
	if err != nil {
		return -1, true, err
	}
	defer target.Close()
	if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
		return -1, true, fmt.Errorf("wire: enter %s: %w", nsPath, err)
	}
	fd, err = bound(ifname)
	if rerr := unix.Setns(int(self.Fd()), unix.CLONE_NEWNET); rerr != nil {
		if fd >= 0 {
			unix.Close(fd)
		}
		return -1, false, fmt.Errorf("wire: back from %s: %w", nsPath, rerr)
	}
	return fd, true, err
}

// bound is a raw socket for every protocol, bound to ifname of the
// current thread's namespace, with a large receive buffer (a burst of
// writes must not overrun it) and a read timeout so that Stop is seen.
func bound(ifname string) (int, error) {
	ifc, err := net.InterfaceByName(ifname)
	if err != nil {
		return -1, fmt.Errorf("wire: %w", err)
	}
	proto := htons(unix.ETH_P_ALL)
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, int(proto))
	if err != nil {
		return -1, fmt.Errorf("wire: socket: %w", err)
	}
	fail := func(what string, err error) (int, error) {
		unix.Close(fd)
		return -1, fmt.Errorf("wire: %s: %w", what, err)
	}
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: proto, Ifindex: ifc.Index}); err != nil {
		return fail("bind "+ifname, err)
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 32<<20); err != nil {
		return fail("SO_RCVBUFFORCE", err)
	}
	tv := unix.Timeval{Usec: 100_000}
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		return fail("SO_RCVTIMEO", err)
	}
	return fd, nil
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

func (c *Capture) read() {
	defer close(c.done)
	// GSO frames on a veth reach 64 KiB and more; a frame longer than the
	// buffer is counted as dropped (MSG_TRUNC gives its real length).
	buf := make([]byte, 256<<10)
	for {
		select {
		case <-c.stop:
			return
		default:
		}
		n, _, err := unix.Recvfrom(c.fd, buf, unix.MSG_TRUNC)
		if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			c.mu.Lock()
			c.err = err
			c.mu.Unlock()
			return
		}
		c.mu.Lock()
		c.res.Packets++
		if n > len(buf) {
			c.res.Dropped += n
		} else {
			c.add(buf[:n])
		}
		c.mu.Unlock()
	}
}

// add keeps frame's TCP payload, if it is IPv4 TCP with one.
func (c *Capture) add(frame []byte) {
	if len(frame) < 14 || binary.BigEndian.Uint16(frame[12:14]) != unix.ETH_P_IP {
		return
	}
	ip := frame[14:]
	if len(ip) < 20 || ip[0]>>4 != 4 || ip[9] != unix.IPPROTO_TCP {
		return
	}
	ihl := int(ip[0]&0x0f) * 4
	total := int(binary.BigEndian.Uint16(ip[2:4]))
	if total == 0 || total > len(ip) { // a GSO frame may carry 0: take what came
		total = len(ip)
	}
	if ihl < 20 || total < ihl+20 {
		return
	}
	tcp := ip[ihl:total]
	doff := int(tcp[12]>>4) * 4
	if doff < 20 || doff > len(tcp) {
		return
	}
	payload := tcp[doff:]
	if len(payload) == 0 {
		return
	}
	if c.res.Bytes+len(payload) > maxKeep {
		c.res.Dropped += len(payload)
		return
	}
	f := Flow{Src: net.IP(ip[12:16]).String(), Dst: net.IP(ip[16:20]).String(),
		SrcPort: binary.BigEndian.Uint16(tcp[0:2]), DstPort: binary.BigEndian.Uint16(tcp[2:4])}
	c.res.Streams[f] = append(c.res.Streams[f], payload...)
	c.res.Bytes += len(payload)
}

// Stop ends the capture, closes the socket and returns what it saw, with
// the kernel's count of dropped frames added to Dropped.
func (c *Capture) Stop() (Result, error) {
	close(c.stop)
	<-c.done
	var st unix.TpacketStats
	if s, err := unix.GetsockoptTpacketStats(c.fd, unix.SOL_PACKET, unix.PACKET_STATISTICS); err == nil {
		st = *s
	}
	unix.Close(c.fd)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.res.Dropped += int(st.Drops)
	return c.res, c.err
}

// Contains lists the flows whose payload holds text.
func (r Result) Contains(text []byte) []Flow {
	var out []Flow
	for f, b := range r.Streams {
		if bytes.Contains(b, text) {
			out = append(out, f)
		}
	}
	return out
}
