package gluster

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"time"
)

// TLS on the I/O path (Options.TLS). GlusterFS reads its certificate, key
// and CA list from /etc/ssl/glusterfs.{pem,key,ca} unless the volume says
// otherwise; the harness never writes there (a killed run would leave them,
// and a host's own GlusterFS may use them). It sets the volume options
// ssl.own-cert, ssl.private-key and ssl.ca-list instead, which glusterd
// writes into both the brick's and the clients' volfiles, pointing at
// files in the slot's directory (/tmp/fvgl/N/ssl, removed with the slot).
// Server and clients run on this host, so one path serves both.
//
// The management connection (volfile fetch on port 24007) stays in clear:
// TLS there is switched on by a file, /var/lib/glusterd/secure-access, on
// every server and every client host, and the host's /var/lib/glusterd is
// not the harness's to write. The volfile carries no data, only options.

// CertCN is the common name of the certificate every peer of the harness
// presents (server and clients), and the only name auth.ssl-allow lets in.
const CertCN = "fvgl-peer"

// tlsFiles are the paths GlusterFS is told to read.
type tlsFiles struct{ Cert, Key, CA string }

// makeTLS writes a CA and one peer certificate signed by it (ECDSA P-256,
// valid for a day) under dir/ssl. One peer certificate for the server and
// all clients: each side checks the other's chain against the CA, and
// the server lets in only CertCN.
func makeTLS(dir string) (tlsFiles, error) {
	sslDir := filepath.Join(dir, "ssl")
	if err := os.MkdirAll(sslDir, 0o700); err != nil {
		return tlsFiles{}, err
	}
	f := tlsFiles{Cert: filepath.Join(sslDir, "glusterfs.pem"), Key: filepath.Join(sslDir, "glusterfs.key"), CA: filepath.Join(sslDir, "glusterfs.ca")}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return f, err
	}
	now := time.Now()
	ca := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "fvgl-test-ca"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		return f, err
	}
	peerKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return f, err
	}
	peer := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: CertCN},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour), KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}
	peerDER, err := x509.CreateCertificate(rand.Reader, peer, ca, &peerKey.PublicKey, caKey)
	if err != nil {
		return f, err
	}
	keyDER, err := x509.MarshalECPrivateKey(peerKey)
	if err != nil {
		return f, err
	}
	for _, w := range []struct {
		path, typ string
		der       []byte
		mode      os.FileMode
	}{{f.CA, "CERTIFICATE", caDER, 0o644}, {f.Cert, "CERTIFICATE", peerDER, 0o644}, {f.Key, "EC PRIVATE KEY", keyDER, 0o600}} {
		if err := os.WriteFile(w.path, pem.EncodeToMemory(&pem.Block{Type: w.typ, Bytes: w.der}), w.mode); err != nil {
			return f, fmt.Errorf("tls: %w", err)
		}
	}
	return f, nil
}

// tlsSettings are the volume options that turn TLS on for the I/O path
// with files f: both ends encrypt, the chain is one CA deep, and only
// CertCN is let in.
func tlsSettings(f tlsFiles) [][2]string {
	return [][2]string{
		{"ssl.own-cert", f.Cert}, {"ssl.private-key", f.Key}, {"ssl.ca-list", f.CA},
		{"ssl.certificate-depth", "1"}, {"auth.ssl-allow", CertCN},
		{"client.ssl", "on"}, {"server.ssl", "on"},
	}
}
