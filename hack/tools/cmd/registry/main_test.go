package main

import (
	"bytes"
	"log"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

func TestCheckAddrRefusesPublicAndWildcardAddresses(t *testing.T) {
	for addr, ok := range map[string]bool{
		"127.0.0.1:5000": true, "[::1]:5000": true, "10.89.1.1:5000": true,
		"0.0.0.0:5000": false, ":5000": false, "8.8.8.8:5000": false, "localhost:5000": false, "127.0.0.1": false,
	} {
		if err := checkAddr(addr); (err == nil) != ok {
			t.Errorf("checkAddr(%q) = %v, want ok=%v", addr, err, ok)
		}
	}
}

// The quick-start story proves where each image came from by the digests
// this log names: a pull of a tag must log the digest it was served.
func TestRequestLogNamesTheDigestServed(t *testing.T) {
	var buf bytes.Buffer
	l := log.New(&buf, "", 0)
	srv := httptest.NewServer(logRequests(l, registry.New(registry.Logger(l))))
	defer srv.Close()
	ref, err := name.ParseReference(strings.TrimPrefix(srv.URL, "http://")+"/filevol:v1", name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	img, err := random.Image(1024, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(ref, img); err != nil {
		t.Fatal(err)
	}
	want, _ := img.Digest()
	buf.Reset()
	if _, err := remote.Image(ref); err != nil {
		t.Fatal(err)
	}
	line := "GET /v2/filevol/manifests/v1 200 " + want.String()
	if !strings.Contains(buf.String(), line) {
		t.Fatalf("the log does not have %q:\n%s", line, buf.String())
	}
	// A blob never pushed is logged as refused, with no digest.
	buf.Reset()
	bad, _ := name.ParseReference(strings.TrimPrefix(srv.URL, "http://")+"/filevol:missing", name.Insecure)
	if _, err := remote.Image(bad); err == nil {
		t.Fatal("pulling a tag never pushed succeeded")
	}
	if !strings.Contains(buf.String(), "/v2/filevol/manifests/missing 404 -") {
		t.Fatalf("a refused pull is not logged as 404:\n%s", buf.String())
	}
}
