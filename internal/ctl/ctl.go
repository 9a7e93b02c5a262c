// Package ctl is "filevol ctl": a small CSI client so a person can drive
// the whole volume lifecycle by hand against a running driver. It speaks
// only the CSI gRPC API, exactly as the sidecars and kubelet do.
package ctl

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/filevol/filevol/internal/options"
)

const usage = `usage: filevol ctl [--endpoint E] [--timeout D] COMMAND [flags] [ARG]

The endpoint defaults to $FILEVOL_ENDPOINT. Commands:
  info                                   plugin, node and capacity information
  create NAME [--size 1Gi] [--fstype ext4|xfs|btrfs] [--block] [--param k=v]...
  list                                   every volume
  get ID                                 one volume and its condition
  stage ID --staging DIR [--block] [--ro]
  publish ID --staging DIR --target PATH [--block] [--ro]
  stats ID --path PATH
  unpublish ID --target PATH
  unstage ID --staging DIR
  delete ID
`

// Main runs one ctl command and returns the process exit code.
func Main(args []string, stdout, stderr io.Writer) int {
	gf := flag.NewFlagSet("filevol ctl", flag.ContinueOnError)
	gf.SetOutput(io.Discard)
	endpoint := gf.String("endpoint", os.Getenv("FILEVOL_ENDPOINT"), "CSI endpoint")
	timeout := gf.Duration("timeout", 2*time.Minute, "timeout of the call")
	if err := gf.Parse(args); err != nil || gf.NArg() == 0 {
		fmt.Fprint(stderr, usage)
		if err == flag.ErrHelp {
			return 0
		}
		return 2
	}
	if *endpoint == "" {
		fmt.Fprintln(stderr, "filevol ctl: no endpoint: pass --endpoint or set FILEVOL_ENDPOINT")
		return 2
	}
	cmd, ok := commands[gf.Arg(0)]
	if !ok {
		fmt.Fprintf(stderr, "filevol ctl: unknown command %q\n%s", gf.Arg(0), usage)
		return 2
	}
	network, addr, err := options.ParseEndpoint(*endpoint)
	if err != nil {
		fmt.Fprintln(stderr, "filevol ctl:", err)
		return 2
	}
	target := addr
	if network == "unix" {
		target = "unix://" + addr
	}
	conn, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		fmt.Fprintln(stderr, "filevol ctl:", err)
		return 1
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	c := client{
		id: csipb.NewIdentityClient(conn), ctrl: csipb.NewControllerClient(conn),
		node: csipb.NewNodeClient(conn), out: stdout,
	}
	if err := cmd(ctx, c, gf.Args()[1:]); err != nil {
		fmt.Fprintln(stderr, "filevol ctl:", err)
		return 1
	}
	return 0
}

type client struct {
	id   csipb.IdentityClient
	ctrl csipb.ControllerClient
	node csipb.NodeClient
	out  io.Writer
}

// printed prints resp, the response of a call that returned err, when
// the call succeeded, and returns err.
func (c client) printed(resp proto.Message, err error) error {
	if err == nil {
		c.print(resp)
	}
	return err
}

// did writes what a call that returned err did (format, with args) when
// it succeeded, and returns err.
func (c client) did(err error, format string, args ...any) error {
	if err == nil {
		fmt.Fprintf(c.out, format, args...)
	}
	return err
}

// print writes a response as indented JSON.
func (c client) print(m proto.Message) {
	b, _ := protojson.MarshalOptions{Multiline: true, Indent: "  ", EmitUnpopulated: false}.Marshal(m)
	fmt.Fprintln(c.out, string(b))
}

// parse parses a command's flags; it wants exactly one positional argument
// (the name or ID) unless none is expected.
func parse(fs *flag.FlagSet, args []string, wantArg bool) (string, error) {
	fs.SetOutput(io.Discard)
	// Accept the argument before or after the flags.
	var pos string
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		pos, args = args[0], args[1:]
	}
	if err := fs.Parse(args); err != nil {
		return "", err
	}
	if pos == "" && fs.NArg() > 0 {
		pos = fs.Arg(0)
	}
	if wantArg && pos == "" {
		return "", fmt.Errorf("%s: missing argument (see filevol ctl --help)", fs.Name())
	}
	return pos, nil
}

func capability(block, ro bool, fsType string) *csipb.VolumeCapability {
	mode := csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER
	if ro {
		mode = csipb.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY
	}
	c := &csipb.VolumeCapability{AccessMode: &csipb.VolumeCapability_AccessMode{Mode: mode}}
	if block {
		c.AccessType = &csipb.VolumeCapability_Block{Block: &csipb.VolumeCapability_BlockVolume{}}
	} else {
		c.AccessType = &csipb.VolumeCapability_Mount{Mount: &csipb.VolumeCapability_MountVolume{FsType: fsType}}
	}
	return c
}
