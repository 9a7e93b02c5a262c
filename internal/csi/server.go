package csi

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/kubernetes-csi/csi-lib-utils/protosanitizer"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"

	"github.com/filevol/filevol/internal/options"
)

// Listen opens the CSI endpoint. A stale unix socket left by a killed
// process is removed first (only if it is a socket); the new socket is
// made 0600: the CSI API has no authentication.
func Listen(endpoint string) (net.Listener, error) {
	network, addr, err := options.ParseEndpoint(endpoint)
	if err != nil {
		return nil, err
	}
	if network == "unix" {
		if st, err := os.Lstat(addr); err == nil {
			if st.Mode()&os.ModeSocket == 0 {
				return nil, fmt.Errorf("endpoint %s exists and is not a socket; refusing to remove it", addr)
			}
			if err := os.Remove(addr); err != nil {
				return nil, fmt.Errorf("remove stale socket %s: %w", addr, err)
			}
		}
		if err := os.MkdirAll(filepath.Dir(addr), 0o750); err != nil {
			return nil, err
		}
	}
	lis, err := net.Listen(network, addr)
	if err != nil {
		return nil, err
	}
	if network == "unix" {
		if err := os.Chmod(addr, 0o600); err != nil {
			lis.Close()
			return nil, err
		}
	}
	return lis, nil
}

// CallObserver is told the outcome of every call (internal/metrics
// implements it): the gRPC full method, the status code's name ("OK",
// "NotFound", ...) and how long the call took.
type CallObserver interface {
	ObserveCall(fullMethod, code string, d time.Duration)
}

// NewGRPCServer returns a gRPC server whose every call, unary or
// streaming, is logged (secrets stripped by protosanitizer), whose every
// error goes through toStatus and whose every outcome is reported to the
// observers, if any are given.
func NewGRPCServer(observers ...CallObserver) *grpc.Server {
	return grpc.NewServer(grpc.UnaryInterceptor(interceptor(observers)), grpc.StreamInterceptor(streamInterceptor(observers)))
}

func interceptor(observers []CallObserver) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		start := time.Now()
		klog.V(4).InfoS("call", "method", info.FullMethod, "request", protosanitizer.StripSecrets(req))
		resp, err := handler(ctx, req)
		err = finish(info.FullMethod, start, err, observers)
		if err == nil {
			klog.V(5).InfoS("response", "method", info.FullMethod, "response", protosanitizer.StripSecrets(resp))
		}
		return resp, err
	}
}

// streamInterceptor does for a streaming call what interceptor does for a
// unary one: each message received is logged as a request, each sent as
// a response, and the call's end goes through finish.
func streamInterceptor(observers []CallObserver) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		start := time.Now()
		klog.V(4).InfoS("stream", "method", info.FullMethod)
		ls := &loggedStream{ServerStream: ss, method: info.FullMethod}
		err := handler(srv, ls)
		return finish(info.FullMethod, start, err, observers, "messagesSent", ls.sent)
	}
}

// finish maps a call's error to its status (toStatus), logs the outcome
// and tells the observers; it returns the mapped error.
func finish(method string, start time.Time, err error, observers []CallObserver, kv ...any) error {
	err = toStatus(err)
	took := time.Since(start)
	st, _ := status.FromError(err) // nil err: codes.OK
	if err != nil {
		klog.ErrorS(nil, "call failed", append([]any{"method", method, "code", st.Code(), "message", st.Message(), "duration", took}, kv...)...)
	} else {
		klog.V(3).InfoS("call done", append([]any{"method", method, "duration", took}, kv...)...)
	}
	for _, o := range observers {
		o.ObserveCall(method, st.Code().String(), took)
	}
	return err
}

// loggedStream logs a streaming call's messages, secrets stripped.
type loggedStream struct {
	grpc.ServerStream
	method string
	sent   int
}

func (s *loggedStream) RecvMsg(m any) error {
	err := s.ServerStream.RecvMsg(m)
	if err == nil {
		klog.V(4).InfoS("request", "method", s.method, "request", protosanitizer.StripSecrets(m))
	}
	return err
}

func (s *loggedStream) SendMsg(m any) error {
	err := s.ServerStream.SendMsg(m)
	if err == nil {
		s.sent++
		klog.V(5).InfoS("response", "method", s.method, "response", protosanitizer.StripSecrets(m))
	}
	return err
}

// Serve serves s on lis until ctx is done, then stops accepting, lets
// in-flight calls finish (up to grace) and removes the unix socket.
func Serve(ctx context.Context, s *grpc.Server, lis net.Listener, grace time.Duration) error {
	errc := make(chan error, 1)
	go func() { errc <- s.Serve(lis) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	done := make(chan struct{})
	go func() { s.GracefulStop(); close(done) }()
	select {
	case <-done:
	case <-time.After(grace):
		klog.InfoS("in-flight calls did not finish in time; stopping", "grace", grace)
		s.Stop()
	}
	if err := <-errc; err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		return err
	}
	if ua, ok := lis.Addr().(*net.UnixAddr); ok {
		_ = os.Remove(ua.Name)
	}
	return nil
}
