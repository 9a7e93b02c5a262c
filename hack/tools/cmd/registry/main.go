// Command registry is the e2e harness's container registry: an OCI
// distribution registry in memory (go-containerregistry's pkg/registry)
// that the quick-start story pushes the driver's image to with `make push`,
// as a user pushes to theirs, and that the cluster's containerd pulls from.
//
// It writes one line per request to -log: method, path, status and the
// digest it served (Docker-Content-Digest). The story reads that log to
// prove that every image the release runs came from here and from nowhere
// else.
//
// It listens only where it is told and refuses addresses that are not on a
// loopback or private network: it has no authentication.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/google/go-containerregistry/pkg/registry"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:5000", "host:port to listen on (loopback or a private address only)")
	logPath := flag.String("log", "", "the request log (default: standard error)")
	flag.Parse()
	if err := run(*addr, *logPath); err != nil {
		fmt.Fprintln(os.Stderr, "registry:", err)
		os.Exit(1)
	}
}

func run(addr, logPath string) error {
	if err := checkAddr(addr); err != nil {
		return err
	}
	var out io.Writer = os.Stderr
	if logPath != "" {
		f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return err
		}
		defer f.Close()
		out = f
	}
	reqLog := log.New(out, "", log.LstdFlags|log.Lmicroseconds)
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	srv := &http.Server{
		// The registry's own log (uploads, errors) goes with the requests.
		Handler:           logRequests(reqLog, registry.New(registry.Logger(reqLog))),
		ReadHeaderTimeout: 10 * time.Second,
	}
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	go func() { <-stop; _ = srv.Close() }()
	reqLog.Printf("listening on %s", ln.Addr())
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// checkAddr refuses to serve an unauthenticated registry on a public or
// wildcard address.
func checkAddr(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	ip := net.ParseIP(host)
	if ip == nil || !(ip.IsLoopback() || ip.IsPrivate()) {
		return fmt.Errorf("-addr %s: want a loopback or private IP address (the registry has no authentication)", addr)
	}
	return nil
}

// statusWriter remembers the status a handler wrote.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	w.status = code
	w.ResponseWriter.WriteHeader(code)
}

// logRequests writes "METHOD PATH STATUS DIGEST" for every request.
func logRequests(l *log.Logger, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
		next.ServeHTTP(sw, r)
		digest := sw.Header().Get("Docker-Content-Digest")
		if digest == "" {
			digest = "-"
		}
		l.Printf("%s %s %d %s", r.Method, r.URL.Path, sw.status, digest)
	})
}
