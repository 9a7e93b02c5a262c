// Package clienttls installs the TLS files a shared filesystem's client
// reads on its host (a GlusterFS FUSE client's certificate, key and CA
// list) from a Kubernetes Secret mounted into filevol's node pod, and
// keeps them current when the Secret is rotated.
//
// The client is the node's own mount, not a process of filevol's pod: a
// Secret mounted into the pod does not reach it, so the files are copied
// into a host directory of filevol's own (never /etc, whose files belong
// to the host), which the filesystem's volume options name
// (GlusterFS: ssl.own-cert, ssl.private-key, ssl.ca-list). Each file is
// replaced all at once (durable.Publish): a client that connects while
// they change reads the old file or the new one, never part of one.
package clienttls

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/filevol/filevol/internal/durable"
)

// The Secret's keys: those of a kubernetes.io/tls Secret with its CA, as
// cert-manager writes them.
const (
	KeyCert = "tls.crt"
	KeyKey  = "tls.key"
	KeyCA   = "ca.crt"
)

// The files installed, by GlusterFS's own names (its defaults are
// /etc/ssl/glusterfs.{pem,key,ca}).
const (
	FileCert = "glusterfs.pem"
	FileKey  = "glusterfs.key"
	FileCA   = "glusterfs.ca"
)

// Set is one certificate, its private key and the CA list, as PEM.
type Set struct {
	Cert, Key, CA []byte
	// Leaf is Cert's first certificate, parsed.
	Leaf *x509.Certificate
}

// Read reads and checks a Set from dir, a mounted Secret. Every error
// names the Secret's key and what is wrong with it, never its content.
func Read(dir string, now time.Time) (Set, error) {
	var s Set
	for _, f := range []struct {
		key string
		to  *[]byte
	}{{KeyCert, &s.Cert}, {KeyKey, &s.Key}, {KeyCA, &s.CA}} {
		b, err := os.ReadFile(filepath.Join(dir, f.key))
		if errors.Is(err, os.ErrNotExist) {
			return Set{}, fmt.Errorf("the Secret mounted at %s has no key %s (want %s, %s and %s: a kubernetes.io/tls Secret with its CA, as cert-manager writes it)",
				dir, f.key, KeyCert, KeyKey, KeyCA)
		}
		if err != nil {
			return Set{}, fmt.Errorf("read the Secret's key %s: %w", f.key, err)
		}
		*f.to = b
	}
	pair, err := tls.X509KeyPair(s.Cert, s.Key)
	if err != nil {
		return Set{}, fmt.Errorf("the Secret's %s and %s are not a certificate and its private key: %v", KeyCert, KeyKey, err)
	}
	s.Leaf = pair.Leaf // parsed by X509KeyPair
	if now.After(s.Leaf.NotAfter) || now.Before(s.Leaf.NotBefore) {
		return Set{}, fmt.Errorf("the Secret's %s (subject %q) is valid from %s to %s, not now (%s): the files installed before are kept",
			KeyCert, s.Leaf.Subject.CommonName, s.Leaf.NotBefore.UTC().Format(time.RFC3339), s.Leaf.NotAfter.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339))
	}
	if n, err := countCerts(s.CA); err != nil || n == 0 {
		return Set{}, fmt.Errorf("the Secret's %s holds no PEM certificate (%v)", KeyCA, err)
	}
	return s, nil
}

// Verify says whether the Set's certificate chains to its own CA list.
// Not an error: the peers check each other against their own CA lists,
// which may differ from the one shipped with this certificate.
func (s Set) Verify(now time.Time) error {
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(s.CA) {
		return fmt.Errorf("%s holds no usable certificate", KeyCA)
	}
	_, err := s.Leaf.Verify(x509.VerifyOptions{Roots: roots, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}})
	return err
}

// countCerts counts the CERTIFICATE blocks of PEM data, each parsed.
func countCerts(data []byte) (int, error) {
	n := 0
	for {
		var b *pem.Block
		b, data = pem.Decode(data)
		if b == nil {
			return n, nil
		}
		if b.Type != "CERTIFICATE" {
			continue
		}
		if _, err := x509.ParseCertificate(b.Bytes); err != nil {
			return n, err
		}
		n++
	}
}

// Install writes s into dir (made if missing; mode 0700, also when
// kubelet made it for a hostPath volume) as FileCert,
// FileKey and FileCA, each mode 0600, replacing only the files whose
// content differs. It reports whether any file changed. The key is
// written first and the CA list last, so that a client that reads them
// between two replacements fails its handshake and retries rather than
// trusting a CA list that does not go with its certificate for long.
func Install(s Set, dir string) (changed bool, err error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return false, err
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return false, err
	}
	for _, f := range []struct {
		name string
		data []byte
	}{{FileKey, s.Key}, {FileCert, s.Cert}, {FileCA, s.CA}} {
		path := filepath.Join(dir, f.name)
		if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, f.data) {
			continue
		}
		if err := durable.Publish(durable.TmpName(path), path, f.data, true); err != nil {
			return changed, fmt.Errorf("install %s: %w", path, err)
		}
		changed = true
	}
	return changed, nil
}
