package dirpool

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"path/filepath"
)

// The pool's own directories under .filevol (doc.go has the layout), and
// the names it gives what it moves there.

// randomSuffix makes a trash entry's name unique (<id>.<suffix>).
func randomSuffix() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// entries lists the names in one of the pool's own directories.
func (p *Pool) entries(sub string) ([]string, error) {
	f, err := os.Open(filepath.Join(p.dir, metaDir, sub))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return f.Readdirnames(-1)
}

// metaFD opens one of the pool's own directories.
func (p *Pool) metaFD(sub string) (int, error) {
	return openBeneath(p.root, metaDir+"/"+sub)
}

// listMeta lists one of the pool's own directories (entries) and opens it
// (metaFD), for a pass over what it holds; the caller closes the
// descriptor.
func (p *Pool) listMeta(sub string) (names []string, fd int, err error) {
	if names, err = p.entries(sub); err != nil {
		return nil, -1, err
	}
	if fd, err = p.metaFD(sub); err != nil {
		return nil, -1, err
	}
	return names, fd, nil
}

// String names the pool in logs and errors.
func (p *Pool) String() string { return "directory pool " + p.dir }
