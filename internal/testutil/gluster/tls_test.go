package gluster

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestTLSHarness: Options.TLS makes a CA and a peer certificate that
// verifies against it (as a client and as a server, CN CertCN) in the
// slot's directory, the volume runs with client.ssl and server.ssl on and
// those files, a client mounts it and writes through it, and teardown
// removes the files with the slot. /etc/ssl/glusterfs.* (GlusterFS's
// default files, which the harness must never write) are as they were.
func TestTLSHarness(t *testing.T) {
	etc := map[string]string{}
	for _, f := range []string{"/etc/ssl/glusterfs.pem", "/etc/ssl/glusterfs.key", "/etc/ssl/glusterfs.ca"} {
		etc[f] = statLine(f)
	}
	var slot int
	var dir string
	t.Run("run", func(t *testing.T) {
		g := Start(t, Options{TLS: true})
		slot, dir = g.held.Slot, g.Dir()
		if !g.TLS() {
			t.Fatal("TLS() false")
		}
		ssl := filepath.Join(dir, "ssl")
		pair, err := tls.LoadX509KeyPair(filepath.Join(ssl, "glusterfs.pem"), filepath.Join(ssl, "glusterfs.key"))
		if err != nil {
			t.Fatalf("certificate and key: %v", err)
		}
		caPEM, err := os.ReadFile(filepath.Join(ssl, "glusterfs.ca"))
		if err != nil {
			t.Fatal(err)
		}
		block, _ := pem.Decode(caPEM)
		if block == nil {
			t.Fatal("no PEM block in the CA file")
		}
		ca, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		peer, err := x509.ParseCertificate(pair.Certificate[0])
		if err != nil {
			t.Fatal(err)
		}
		roots := x509.NewCertPool()
		roots.AddCert(ca)
		for _, usage := range []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageServerAuth} {
			if _, err := peer.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{usage}, CurrentTime: time.Now()}); err != nil {
				t.Errorf("peer certificate for %v: %v", usage, err)
			}
		}
		if peer.Subject.CommonName != CertCN {
			t.Errorf("CN %q, want %q", peer.Subject.CommonName, CertCN)
		}
		if fi, err := os.Stat(filepath.Join(ssl, "glusterfs.key")); err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("key file: %v, %v", fi.Mode(), err)
		}
		for key, want := range map[string]string{"client.ssl": "on", "server.ssl": "on", "ssl.ca-list": filepath.Join(ssl, "glusterfs.ca"), "auth.ssl-allow": CertCN} {
			out := g.Gluster(t, "volume", "get", volName, key)
			if !strings.Contains(out, want) {
				t.Errorf("volume get %s: %s, want %s", key, out, want)
			}
		}
		a := g.MountNode(t, "node-a")
		if err := os.WriteFile(filepath.Join(a, "hello"), []byte("over tls"), 0o644); err != nil {
			t.Fatal(err)
		}
		if got, err := os.ReadFile(filepath.Join(g.BrickDir(), "hello")); err != nil || string(got) != "over tls" {
			t.Errorf("brick: %q, %v", got, err)
		}
	})
	assertSlotClean(t, slot, dir, nil)
	for f, was := range etc {
		if now := statLine(f); now != was {
			t.Errorf("%s changed: %s, was %s", f, now, was)
		}
	}
}

// statLine is a file's existence, size and modification time.
func statLine(path string) string {
	fi, err := os.Stat(path)
	if err != nil {
		return err.Error()
	}
	return fi.Mode().String() + " " + fi.ModTime().String() + " " + strconv.FormatInt(fi.Size(), 10)
}
