package clienttls

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/filevol/filevol/internal/testutil/testpki"
)

// secret writes a mounted Secret's keys into a new directory.
func secret(t *testing.T, cert, key, ca []byte) string {
	t.Helper()
	dir := t.TempDir()
	for name, data := range map[string][]byte{KeyCert: cert, KeyKey: key, KeyCA: ca} {
		if data == nil {
			continue
		}
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func issue(t *testing.T, ca *testpki.CA, cn string, from, to time.Time) (cert, key []byte) {
	t.Helper()
	cert, key, err := ca.Issue(cn, from, to)
	if err != nil {
		t.Fatal(err)
	}
	return cert, key
}

func newCA(t *testing.T, now time.Time) *testpki.CA {
	t.Helper()
	ca, err := testpki.NewCA("test-ca", now.Add(-time.Hour), now.Add(48*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

func TestReadRefusesWhatNoClientCouldUse(t *testing.T) {
	now := time.Now()
	ca, other := newCA(t, now), newCA(t, now)
	cert, key := issue(t, ca, "peer", now.Add(-time.Hour), now.Add(time.Hour))
	_, otherKey := issue(t, other, "peer", now.Add(-time.Hour), now.Add(time.Hour))
	expired, expiredKey := issue(t, ca, "peer", now.Add(-3*time.Hour), now.Add(-time.Hour))
	for _, c := range []struct {
		name          string
		cert, key, ca []byte
		want          string
	}{
		{"no certificate", nil, key, ca.PEM, "no key tls.crt"},
		{"no key", cert, nil, ca.PEM, "no key tls.key"},
		{"no CA", cert, key, nil, "no key ca.crt"},
		{"key of another certificate", cert, otherKey, ca.PEM, "tls.crt and tls.key are not a certificate and its private key"},
		{"empty certificate", []byte{}, key, ca.PEM, "tls.crt and tls.key"},
		{"not PEM", []byte("\xff\xfe not pem"), key, ca.PEM, "tls.crt and tls.key"},
		{"expired", expired, expiredKey, ca.PEM, "not now"},
		{"CA list without a certificate", cert, key, []byte("-----BEGIN GARBAGE-----\nAAAA\n-----END GARBAGE-----\n"), "ca.crt holds no PEM certificate"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Read(secret(t, c.cert, c.key, c.ca), now)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Read: %v, want an error saying %q", err, c.want)
			}
			if strings.Contains(err.Error(), "PRIVATE KEY") {
				t.Fatalf("the error quotes key material: %v", err)
			}
		})
	}
	s, err := Read(secret(t, cert, key, ca.PEM), now)
	if err != nil {
		t.Fatalf("a good Secret: %v", err)
	}
	if err := s.Verify(now); err != nil {
		t.Errorf("a certificate of its own CA: %v", err)
	}
	s.CA = other.PEM
	if err := s.Verify(now); err == nil {
		t.Error("a certificate checked against another CA verified")
	}
}

func TestInstallReplacesOnlyWhatChanged(t *testing.T) {
	now := time.Now()
	ca := newCA(t, now)
	cert, key := issue(t, ca, "peer", now.Add(-time.Hour), now.Add(time.Hour))
	dir := filepath.Join(t.TempDir(), "tls")
	if err := os.Mkdir(dir, 0o755); err != nil { // as kubelet makes a hostPath DirectoryOrCreate
		t.Fatal(err)
	}
	s, err := Read(secret(t, cert, key, ca.PEM), now)
	if err != nil {
		t.Fatal(err)
	}
	if changed, err := Install(s, dir); err != nil || !changed {
		t.Fatalf("first install: changed %v, %v", changed, err)
	}
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("directory: %v %v, want mode 0700", fi.Mode(), err)
	}
	for name, want := range map[string][]byte{FileCert: cert, FileKey: key, FileCA: ca.PEM} {
		got, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil || string(got) != string(want) {
			t.Fatalf("%s: %v, content equal: %v", name, err, string(got) == string(want))
		}
		if fi, _ := os.Stat(filepath.Join(dir, name)); fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v, want 0600", name, fi.Mode().Perm())
		}
	}
	keyInode := inode(t, filepath.Join(dir, FileKey))
	if changed, err := Install(s, dir); err != nil || changed {
		t.Fatalf("same Set again: changed %v, %v", changed, err)
	}
	cert2, key2 := issue(t, ca, "peer", now.Add(-time.Hour), now.Add(2*time.Hour))
	s2, err := Read(secret(t, cert2, key2, ca.PEM), now)
	if err != nil {
		t.Fatal(err)
	}
	caInode := inode(t, filepath.Join(dir, FileCA))
	if changed, err := Install(s2, dir); err != nil || !changed {
		t.Fatalf("rotated: changed %v, %v", changed, err)
	}
	if inode(t, filepath.Join(dir, FileKey)) == keyInode {
		t.Error("the key was rewritten in place, not replaced")
	}
	if inode(t, filepath.Join(dir, FileCA)) != caInode {
		t.Error("the CA list, unchanged, was replaced")
	}
	left, _ := filepath.Glob(filepath.Join(dir, "*.tmp-*"))
	if len(left) != 0 {
		t.Errorf("temporary files left: %v", left)
	}
}

func inode(t *testing.T, path string) uint64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return sysIno(fi)
}

func TestKeepInstallsARotationAndKeepsFilesOnABadOne(t *testing.T) {
	now := time.Now()
	ca := newCA(t, now)
	cert, key := issue(t, ca, "peer", now.Add(-time.Hour), now.Add(time.Hour))
	from, to := secret(t, cert, key, ca.PEM), filepath.Join(t.TempDir(), "tls")
	if err := InstallFrom(from, to); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { Keep(ctx, from, to, 10*time.Millisecond); close(done) }()
	defer func() { cancel(); <-done }()

	// A Secret half-updated (a key of another certificate) keeps the old files.
	_, badKey := issue(t, ca, "peer", now.Add(-time.Hour), now.Add(time.Hour))
	if err := os.WriteFile(filepath.Join(from, KeyKey), badKey, 0o600); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	if got, _ := os.ReadFile(filepath.Join(to, FileKey)); string(got) != string(key) {
		t.Fatal("a key that does not match the certificate replaced the installed one")
	}
	// The whole rotation lands.
	cert2, key2 := issue(t, ca, "peer", now.Add(-time.Hour), now.Add(3*time.Hour))
	for name, data := range map[string][]byte{KeyCert: cert2, KeyKey: key2} {
		if err := os.WriteFile(filepath.Join(from, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		got, _ := os.ReadFile(filepath.Join(to, FileCert))
		if string(got) == string(cert2) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the rotated certificate was not installed")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got, _ := os.ReadFile(filepath.Join(to, FileKey)); string(got) != string(key2) {
		t.Fatal("the rotated key was not installed with its certificate")
	}
}
