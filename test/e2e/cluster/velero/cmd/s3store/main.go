// Command s3store is the e2e harness's S3-compatible object store for Velero's
// backup location: gofakes3 (MIT) over its bbolt backend, so objects live in
// one file and survive a restart of the store. It listens on the address it
// is given (a host address on a bridge the harness owns; an unspecified
// address such as 0.0.0.0 is refused, so the store is never reachable from
// every network of the machine), creates the bucket if it is missing, prints
// "listening on ADDR" once it accepts connections, and returns after SIGTERM
// or SIGINT once in-flight requests have finished.
//
// gofakes3 checks no signature: any access key is accepted. That is enough for
// a store that only the harness's own bridge can reach.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"regexp"
	"syscall"
	"time"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3bolt"
	bolt "go.etcd.io/bbolt"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout); err != nil {
		log.SetFlags(0)
		log.Fatalf("s3store: %v", err)
	}
}

// bucketName: the S3 naming rules (3-63 lower-case letters, digits, dots and
// hyphens, starting and ending with a letter or digit).
var bucketName = regexp.MustCompile(`^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$`)

func run(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("s3store", flag.ContinueOnError)
	listen := fs.String("listen", "", "IP:PORT to listen on (a specific address; port 0 picks one)")
	db := fs.String("db", "", "bbolt file that holds the objects (created if missing)")
	bucket := fs.String("bucket", "velero", "bucket to create if missing")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if err := checkListen(*listen); err != nil {
		return err
	}
	if *db == "" {
		return errors.New("-db is required: the file the objects are kept in")
	}
	if !bucketName.MatchString(*bucket) {
		return fmt.Errorf("-bucket %q is not a valid S3 bucket name (3-63 of a-z 0-9 . -)", *bucket)
	}

	// bbolt locks the file: a second store on it fails here instead of waiting.
	file, err := bolt.Open(*db, 0o600, &bolt.Options{Timeout: 2 * time.Second})
	if err != nil {
		return fmt.Errorf("open %s (another store holding it?): %w", *db, err)
	}
	defer file.Close()
	backend := s3bolt.New(file)
	exists, err := backend.BucketExists(*bucket)
	if err != nil {
		return fmt.Errorf("bucket %s: %w", *bucket, err)
	}
	if !exists {
		if err := backend.CreateBucket(*bucket); err != nil {
			return fmt.Errorf("create bucket %s: %w", *bucket, err)
		}
	}

	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	srv := &http.Server{
		Handler:           gofakes3.New(backend).Server(),
		ReadHeaderTimeout: 30 * time.Second,
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	fmt.Fprintf(out, "listening on %s bucket %s\n", ln.Addr(), *bucket)

	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	// Uploads in flight finish (kopia's packs are tens of MB) before the file
	// is closed; a store that does not drain in a minute is cut off.
	shut, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := srv.Shutdown(shut); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// checkListen accepts IP:PORT with a specific IP: a host name could resolve
// to several addresses and an unspecified one listens everywhere.
func checkListen(addr string) error {
	if addr == "" {
		return errors.New("-listen is required: IP:PORT on a bridge of the harness's own (or 127.0.0.1)")
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("-listen %q: %w", addr, err)
	}
	ip := net.ParseIP(host)
	if ip == nil {
		return fmt.Errorf("-listen %q: %q is not an IP address", addr, host)
	}
	if ip.IsUnspecified() {
		return fmt.Errorf("-listen %q: an unspecified address listens on every network; give the bridge's address", addr)
	}
	return nil
}
