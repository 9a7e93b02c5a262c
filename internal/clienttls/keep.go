package clienttls

import (
	"context"
	"time"

	"k8s.io/klog/v2"
)

// InstallFrom reads the Secret mounted at from and installs it into to,
// logging what it installed (subject, serial, expiry; never the key) and
// a certificate that does not chain to its own CA list.
func InstallFrom(from, to string) error {
	now := time.Now()
	s, err := Read(from, now)
	if err != nil {
		return err
	}
	changed, err := Install(s, to)
	if err != nil {
		return err
	}
	if changed {
		klog.InfoS("shared filesystem client TLS files installed", "dir", to, "subject", s.Leaf.Subject.String(),
			"serial", s.Leaf.SerialNumber.String(), "notAfter", s.Leaf.NotAfter.UTC().Format(time.RFC3339))
		if err := s.Verify(now); err != nil {
			klog.InfoS("warning: the installed certificate does not chain to the Secret's own CA list; the peers must trust its issuer",
				"key", KeyCert, "err", err)
		}
	}
	return nil
}

// Keep installs the Secret again every period until ctx ends: kubelet
// updates a mounted Secret in place when it changes (within about a
// minute), and the client reads the files at its next connection. A
// failed read or install keeps the files installed before, and is logged.
func Keep(ctx context.Context, from, to string, period time.Duration) {
	for ctx.Err() == nil {
		select {
		case <-ctx.Done():
		case <-time.After(period):
		}
		if ctx.Err() != nil {
			return
		}
		if err := InstallFrom(from, to); err != nil {
			klog.ErrorS(err, "shared filesystem client TLS files not updated; the installed ones are kept", "from", from, "dir", to)
		}
	}
}
