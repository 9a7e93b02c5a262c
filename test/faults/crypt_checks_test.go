package faults

import (
	"bytes"
	"crypto/hkdf"
	"crypto/sha512"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/filevol/filevol/internal/hostos/fscrypt"
	"github.com/filevol/filevol/internal/hostos/loop"
	"github.com/filevol/filevol/internal/hostos/mount"
	"github.com/filevol/filevol/internal/keywrap"
	volrec "github.com/filevol/filevol/internal/volume"
)

func (r *cryptRun) image(v *cvol) string  { return filepath.Join(r.p.pool, "volumes", v.id+".img") }
func (r *cryptRun) record(v *cvol) string { return filepath.Join(r.p.pool, "volumes", v.id+".json") }

// keyIdentifier is the identifier the kernel gives a v2 key: HKDF-SHA512
// of the key, no salt, info "fscrypt\0" and context 1
// (HKDF_CONTEXT_KEY_IDENTIFIER in fs/crypto). The test computes it from
// the record to ask the kernel about a key it never added itself.
func keyIdentifier(key []byte) (fscrypt.KeyID, error) {
	b, err := hkdf.Key(sha512.New, key, nil, "fscrypt\x00\x01", len(fscrypt.KeyID{}))
	var id fscrypt.KeyID
	copy(id[:], b)
	return id, err
}

// keyFromRecord opens the data key wrapped in v's record with the
// Secret; ok is false while the record holds none yet.
func (r *cryptRun) keyFromRecord(v *cvol) (fscrypt.KeyID, bool, error) {
	data, err := os.ReadFile(r.record(v))
	if err != nil {
		return fscrypt.KeyID{}, false, err
	}
	var rec volrec.Volume
	if err := json.Unmarshal(data, &rec); err != nil {
		return fscrypt.KeyID{}, false, fmt.Errorf("CORRUPT record %s: %w", r.record(v), err)
	}
	if rec.Encryption == nil {
		return fscrypt.KeyID{}, false, fmt.Errorf("the record of %s says it is in clear", v.id)
	}
	if rec.Encryption.Wrapped == nil {
		return fscrypt.KeyID{}, false, nil
	}
	m, err := keywrap.FromSecret(cryptSecret)
	if err != nil {
		return fscrypt.KeyID{}, false, err
	}
	key, _, err := m.Open(*rec.Encryption.Wrapped)
	if err != nil {
		return fscrypt.KeyID{}, false, fmt.Errorf("the wrapped key of %s does not open with its Secret: %w", v.id, err)
	}
	defer clear(key)
	id, err := keyIdentifier(key)
	return id, err == nil, err
}

// learnKey records v's key identifier from its record, checked against
// the policy of the staged volume's data/ (so that the computation above
// is proven on every run).
func (r *cryptRun) learnKey(v *cvol) {
	r.t.Helper()
	id, ok, err := r.keyFromRecord(v)
	if err != nil || !ok {
		r.t.Fatalf("%s: key from the record: %v (found %v)", v.name, err, ok)
	}
	if v.keyKnown && id != v.key {
		r.t.Fatalf("%s: the record's data key changed from %s to %s", v.name, v.key, id)
	}
	have, ok, err := fscrypt.OS{}.Policy(filepath.Join(v.staging, "data"))
	if err != nil || !ok || have != id {
		r.t.Fatalf("%s: data/ is encrypted under %s (%v, %v), the record's key is %s", v.name, have, ok, err, id)
	}
	v.key, v.keyKnown = id, true
}

// volumeDevices are the loop devices on v's image and the mounts of them.
func (r *cryptRun) volumeDevices(v *cvol) ([]loop.Device, []mount.Info, error) {
	all, err := loop.List()
	if err != nil {
		return nil, nil, err
	}
	table, err := mount.Read()
	if err != nil {
		return nil, nil, err
	}
	var devs []loop.Device
	var mounts []mount.Info
	for _, d := range all {
		if d.BackingFile != r.image(v) {
			continue
		}
		devs = append(devs, d)
		for _, m := range table.Under("/") {
			if m.Source == d.Path {
				mounts = append(mounts, m)
			}
		}
	}
	return devs, mounts, nil
}

func (r *cryptRun) stagingMounted(v *cvol) bool {
	_, mounts, err := r.volumeDevices(v)
	r.must("read the kernel's devices", err)
	for _, m := range mounts {
		if m.MountPoint == v.staging {
			return true
		}
	}
	return false
}

// checkKilled describes what a killed call left and lists what breaks
// the rules: the data key in the kernel only for a filesystem mounted at
// the staging path (anywhere else, root reads ciphertext), no mount of
// the volume but there (and the target, while published), at most one
// loop device, data/ never in clear with files in it, a record whose
// wrapped key opens with the Secret.
func (r *cryptRun) checkKilled(v *cvol) (string, []string) {
	var bad, state []string
	if !v.keyKnown {
		if id, ok, err := r.keyFromRecord(v); err != nil {
			bad = append(bad, err.Error())
		} else if ok {
			v.key, v.keyKnown = id, true
		} else {
			state = append(state, "no key in the record yet")
		}
	}
	devs, mounts, err := r.volumeDevices(v)
	if err != nil {
		return "", []string{err.Error()}
	}
	if len(devs) > 1 {
		bad = append(bad, fmt.Sprintf("%d loop devices on the image", len(devs)))
	}
	staged := false
	for _, m := range mounts {
		switch {
		case m.MountPoint == v.staging && m.Root == "/":
			staged = true
		case m.MountPoint == v.target:
		default:
			bad = append(bad, fmt.Sprintf("mounted at %s (root %s)", m.MountPoint, m.Root))
		}
	}
	switch {
	case staged:
		state = append(state, "mounted at the staging path")
		bad = append(bad, r.checkData(v, v.staging, &state)...)
	case len(devs) == 1:
		state = append(state, "a loop device left, not mounted")
		if v.formatted {
			bad = append(bad, r.checkCiphertext(v, devs[0].Path)...)
		}
	default:
		state = append(state, "no loop device")
		if v.formatted {
			bad = append(bad, r.checkCiphertext(v, r.image(v))...)
		}
	}
	return strings.Join(state, ", "), bad
}

// checkData reads the key's status in the keyring of the filesystem at
// mnt and data/'s policy.
func (r *cryptRun) checkData(v *cvol, mnt string, state *[]string) []string {
	var bad []string
	if v.keyKnown {
		s, err := fscrypt.OS{}.Status(mnt, v.key)
		if err != nil {
			return []string{err.Error()}
		}
		*state = append(*state, "key "+s.String())
	}
	dir := filepath.Join(mnt, "data")
	have, ok, err := fscrypt.OS{}.Policy(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		*state = append(*state, "no data/")
	case err != nil:
		bad = append(bad, err.Error())
	case ok && v.keyKnown && have != v.key:
		bad = append(bad, fmt.Sprintf("data/ encrypted under %s, not the volume's key %s", have, v.key))
	case ok:
		*state = append(*state, "data/ encrypted")
	default:
		*state = append(*state, "data/ not encrypted yet")
		if entries, err := os.ReadDir(dir); err != nil || len(entries) != 0 {
			bad = append(bad, fmt.Sprintf("data/ holds %d entries in clear (%v)", len(entries), err))
		}
	}
	return bad
}

// checkCiphertext mounts source (a device, or the image through a loop
// device of its own) read-only, as root would, and checks that the
// filesystem has no key in its keyring (a filesystem still alive
// somewhere shares its keyring with this mount) and that the marker
// reads as ENOKEY.
func (r *cryptRun) checkCiphertext(v *cvol, source string) []string {
	mnt := filepath.Join(r.dir, "probe")
	if err := os.MkdirAll(mnt, 0o700); err != nil {
		return []string{err.Error()}
	}
	opts := "ro,noload"
	if source == r.image(v) {
		opts += ",loop"
	}
	if out, err := exec.Command("mount", "-t", "ext4", "-o", opts, source, mnt).CombinedOutput(); err != nil {
		return []string{fmt.Sprintf("mount %s as root would: %v: %s", source, err, out)}
	}
	defer func() {
		if out, err := exec.Command("umount", mnt).CombinedOutput(); err != nil {
			r.t.Errorf("umount the probe: %v: %s", err, out)
		}
	}()
	var bad []string
	if v.keyKnown {
		if s, err := (fscrypt.OS{}).Status(mnt, v.key); err != nil || s != fscrypt.Absent {
			bad = append(bad, fmt.Sprintf("the data key is %v (%v) in the keyring of the filesystem, which is not staged", s, err))
		}
	}
	entries, err := os.ReadDir(filepath.Join(mnt, "data"))
	if errors.Is(err, fs.ErrNotExist) && v.marker == "" {
		return bad // no stage got as far as making it
	}
	if err != nil {
		return append(bad, fmt.Sprintf("data/ of the unstaged volume: %v", err))
	}
	for _, e := range entries {
		if e.Name() == "marker" {
			bad = append(bad, "root reads data/'s names in clear")
		}
		if _, err := os.ReadFile(filepath.Join(mnt, "data", e.Name())); !errors.Is(err, unix.ENOKEY) {
			bad = append(bad, fmt.Sprintf("reading %s without the key: %v, want ENOKEY", e.Name(), err))
		}
	}
	if v.marker != "" && len(entries) != 1 {
		bad = append(bad, fmt.Sprintf("data/ holds %d entries, want the marker's file", len(entries)))
	}
	return bad
}

// checkUnstaged checks an unstaged volume: nothing attached or mounted,
// no temporary file in the pool, the record's key the volume's, the
// marker nowhere in the image, and the filesystem ciphertext to root.
func (r *cryptRun) checkUnstaged(v *cvol) []string {
	var bad []string
	devs, mounts, err := r.volumeDevices(v)
	if err != nil {
		return []string{err.Error()}
	}
	for _, d := range devs {
		bad = append(bad, "loop device left: "+d.Path)
	}
	for _, m := range mounts {
		bad = append(bad, "mount left: "+m.MountPoint)
	}
	_ = filepath.WalkDir(r.p.pool, func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && (strings.HasPrefix(d.Name(), ".tmp") || reRandom.MatchString(d.Name())) {
			bad = append(bad, "temporary file left: "+path)
		}
		return nil
	})
	if id, ok, err := r.keyFromRecord(v); err != nil || !ok || id != v.key {
		bad = append(bad, fmt.Sprintf("the record's data key: %s, %v, %v; want %s", id, ok, err, v.key))
	}
	img, err := os.ReadFile(r.image(v))
	switch {
	case err != nil:
		bad = append(bad, err.Error())
	case v.marker != "" && bytes.Contains(img, []byte(v.marker)):
		bad = append(bad, "the marker is in the image in clear")
	}
	if len(bad) == 0 {
		bad = r.checkCiphertext(v, r.image(v))
	}
	return bad
}
