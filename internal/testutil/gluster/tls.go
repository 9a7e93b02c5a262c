package gluster

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/filevol/filevol/internal/testutil/testpki"
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
	now := time.Now()
	ca, err := testpki.NewCA("fvgl-test-ca", now.Add(-time.Hour), now.Add(24*time.Hour))
	if err != nil {
		return f, err
	}
	cert, key, err := ca.Issue(CertCN, now.Add(-time.Hour), now.Add(24*time.Hour))
	if err != nil {
		return f, err
	}
	for _, w := range []struct {
		path string
		data []byte
	}{{f.CA, ca.PEM}, {f.Cert, cert}, {f.Key, key}} {
		if err := os.WriteFile(w.path, w.data, 0o600); err != nil {
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
