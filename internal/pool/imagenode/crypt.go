package imagenode

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"k8s.io/klog/v2"

	"github.com/filevol/filevol/internal/answer"
	"github.com/filevol/filevol/internal/hostos/fscrypt"
	"github.com/filevol/filevol/internal/keywrap"
	"github.com/filevol/filevol/internal/volume"
	"github.com/filevol/filevol/internal/volview"
)

// An encrypted image volume (pool.Encryption, scheme fscrypt) is an ext4
// made with the encrypt feature whose directory dataDirName is encrypted
// under the volume's data key: fscrypt cannot encrypt a filesystem's root,
// so the pods see that directory alone (publishSource), and everything
// they can write is under it. The data key is made at the volume's first
// stage and kept in its record wrapped under the node-stage Secret's
// encryptionKey (package keywrap); each stage unwraps it, adds it to the
// filesystem's keyring after the mount, and the unstage removes it
// before the unmount, so an unstaged volume reads as ciphertext on its
// node, to root too.

// dataDirName is the directory of an encrypted volume's filesystem that
// its targets bind.
const dataDirName = "data"

func dataDir(staging string) string { return filepath.Join(staging, dataDirName) }

// publishSource is what a publish binds onto its target: the staging
// mount, or its encrypted directory for an encrypted volume.
func publishSource(vol volume.Volume, staging string) string {
	if vol.Encrypted() {
		return dataDir(staging)
	}
	return staging
}

// unchanged ends every refusal of a Secret: it comes before anything is
// attached, formatted or mounted.
const unchanged = "nothing was formatted, mounted or changed"

// stageKey returns the data key of an encrypted volume for this stage
// (nil for a volume in clear) and the volume's record as it is now: the
// key opened with the node-stage Secret, and rewrapped in the record
// under its encryptionKey when it opened with previousEncryptionKey (a
// rotation); or, at the volume's first stage, made and recorded before
// anything is encrypted with it. It attaches, formats and mounts nothing,
// so a Secret that cannot open the key leaves the volume as it was.
func (b *Node) stageKey(vol volume.Volume, r volume.StageRequest) (volume.Volume, []byte, error) {
	enc := vol.Encryption
	switch {
	case enc == nil:
		return vol, nil, nil
	case r.Block:
		return vol, nil, answer.FailedPrecondition("volume %s is encrypted (%s: the files of its ext4 filesystem) and cannot be staged for block access; %s",
			vol.ID, enc.Scheme, unchanged)
	case enc.Scheme != volume.EncryptionFscrypt:
		return vol, nil, answer.FailedPrecondition("volume %s is encrypted with %q, which this filevol cannot open (it knows %q); %s",
			vol.ID, enc.Scheme, volume.EncryptionFscrypt, unchanged)
	}
	m, err := keywrap.FromSecret(r.Secrets)
	if err != nil {
		return vol, nil, answer.FailedPrecondition("volume %s is encrypted and the node-stage Secret (the StorageClass's csi.storage.k8s.io/node-stage-secret-name) cannot open it: %v; %s",
			vol.ID, err, unchanged)
	}
	if enc.Wrapped == nil {
		return b.newDataKey(vol, m)
	}
	key, rewrapped, err := m.Open(*enc.Wrapped)
	switch {
	case errors.Is(err, keywrap.ErrWrongKey) && m.Previous == nil:
		return vol, nil, answer.FailedPrecondition("the node-stage Secret's %s is not the key the data key of volume %s was wrapped with "+
			"(during a rotation, keep the old key as %s until every volume was staged once); %s",
			keywrap.SecretKey, vol.ID, keywrap.SecretPreviousKey, unchanged)
	case errors.Is(err, keywrap.ErrWrongKey):
		return vol, nil, answer.FailedPrecondition("neither the node-stage Secret's %s nor its %s is the key the data key of volume %s was wrapped with; %s",
			keywrap.SecretKey, keywrap.SecretPreviousKey, vol.ID, unchanged)
	case errors.Is(err, keywrap.ErrDamaged):
		return vol, nil, answer.FailedPrecondition("the Secret's key is the right one, but the wrapped data key in the record of volume %s does not decrypt: "+
			"the record was changed, or copied from another volume; %s", vol.ID, unchanged)
	case err != nil:
		return vol, nil, answer.FailedPrecondition("open the data key of volume %s: %v; %s", vol.ID, err, unchanged)
	}
	if rewrapped != nil {
		if vol, err = b.pool.SetWrappedKey(vol.ID, *rewrapped); err != nil {
			clear(key)
			return vol, nil, fmt.Errorf("record the data key of volume %s rewrapped under the Secret's new %s: %w", vol.ID, keywrap.SecretKey, err)
		}
		klog.InfoS("rewrapped the data key of an encrypted volume under the Secret's new key", "volumeID", vol.ID, "keyName", rewrapped.KeyName)
	}
	return vol, key, nil
}

// newDataKey makes the volume's data key at its first stage and records
// it, wrapped under m's current material, before anything is encrypted
// with it: a crash later finds it in the record.
func (b *Node) newDataKey(vol volume.Volume, m keywrap.Materials) (volume.Volume, []byte, error) {
	key, err := keywrap.NewDataKey()
	if err != nil {
		return vol, nil, err
	}
	name, err := keywrap.NewKeyName()
	if err == nil {
		var w keywrap.Wrapped
		if w, err = keywrap.Wrap(m.Current, name, key); err == nil {
			vol, err = b.pool.SetWrappedKey(vol.ID, w)
		}
	}
	if err != nil {
		clear(key)
		return vol, nil, fmt.Errorf("make the data key of encrypted volume %s: %w", vol.ID, err)
	}
	klog.InfoS("made the data key of an encrypted volume", "volumeID", vol.ID, "keyName", name)
	return vol, key, nil
}

// unlockData adds key to the keyring of the volume's filesystem mounted
// at staging and makes sure that dataDir is encrypted under it: made and
// encrypted the first time (or after a stage that died between the two),
// refused when it is in clear with files in it or under another key.
func (b *Node) unlockData(vol volume.Volume, staging string, key []byte, readOnly bool) error {
	id, err := b.host.Keys.Add(staging, key)
	if errors.Is(err, fscrypt.ErrNotSupported) {
		return answer.FailedPrecondition("volume %s is encrypted, but its filesystem at %s cannot hold encrypted directories (an ext4 made without the encrypt feature, or not ext4): %v",
			vol.ID, staging, err)
	}
	if err != nil {
		return fmt.Errorf("add the data key of volume %s to the keyring of %s: %w", vol.ID, staging, err)
	}
	dir := dataDir(staging)
	st, err := os.Lstat(dir)
	switch {
	case errors.Is(err, os.ErrNotExist) && readOnly:
		return answer.FailedPrecondition("encrypted volume %s has no %s directory yet, and cannot make one staged read-only", vol.ID, dataDirName)
	case errors.Is(err, os.ErrNotExist):
		if err := os.Mkdir(dir, 0o755); err != nil {
			return fmt.Errorf("make the encrypted directory of volume %s: %w", vol.ID, err)
		}
	case err != nil:
		return err
	case st.Mode().Type() == os.ModeSymlink:
		// Replaced behind filevol's back (the image written while
		// unstaged): a link may name anything on the node.
		return answer.FailedPrecondition("%s of encrypted volume %s is a symbolic link, not the volume's encrypted directory; filevol follows no link in a volume: "+
			"put the directory back (mount the image while the volume is unstaged)", dir, vol.ID)
	case !st.IsDir():
		return answer.FailedPrecondition("%s of encrypted volume %s is not a directory (%s)", dir, vol.ID, st.Mode().Type())
	}
	have, ok, err := b.host.Keys.Policy(dir)
	switch {
	case err != nil:
		return fmt.Errorf("read the encryption of %s: %w", dir, err)
	case ok && have == id:
		return nil
	case ok:
		return answer.FailedPrecondition("%s of volume %s is encrypted under another key (%s) than the volume's (%s)", dir, vol.ID, have, id)
	case readOnly:
		return answer.FailedPrecondition("%s of encrypted volume %s is not encrypted, and cannot be while staged read-only", dir, vol.ID)
	}
	err = b.host.Keys.SetPolicy(dir, id)
	if errors.Is(err, fscrypt.ErrNotEmpty) {
		return answer.FailedPrecondition("%s of encrypted volume %s holds files in clear: filevol encrypts only an empty directory and never rewrites files", dir, vol.ID)
	}
	return err
}

// lockData removes the data key of the volume whose filesystem is mounted
// at staging from its keyring (for every user), before the unmount: a
// copy of the mount in another mount namespace keeps the filesystem, and
// its keyring, alive past this one's unmount. The key is found from the
// encrypted directory's policy: an unstage carries no Secret. A volume in
// clear, or whose filesystem is not mounted at staging, has nothing to
// remove.
func (b *Node) lockData(id, staging string, u volview.Usage) error {
	mounted := false
	for _, m := range u.FS() {
		mounted = mounted || (m.MountPoint == staging && m.Root == "/")
	}
	if !mounted {
		return nil
	}
	vol, err := b.pool.Get(id)
	encrypted := err == nil && vol.Encrypted()
	if err == nil && !encrypted {
		return nil
	}
	// A record that is gone may have been of an encrypted volume: its
	// key goes all the same, and an error says nothing of a volume in clear.
	dir := dataDir(staging)
	if st, lerr := os.Lstat(dir); lerr == nil && encrypted && st.Mode().Type() == os.ModeSymlink {
		// Replaced on the node while staged (a pod sees only what is
		// under it): the policy that names the key is out of reach, and
		// filevol follows no link. Unmounting now could leave the key in
		// a copy of the mount in another namespace.
		return answer.FailedPrecondition("%s of encrypted volume %s is a symbolic link, not the volume's encrypted directory, so filevol cannot tell which key to remove "+
			"and leaves the volume staged, its key in the kernel; put the directory back at %s and retry the unstage", dir, id, dir)
	}
	key, ok, err := b.host.Keys.Policy(dir)
	switch {
	case err != nil && !encrypted:
		return nil
	case errors.Is(err, os.ErrNotExist):
		return nil // no stage got as far as making it: no key was added
	case err != nil:
		return fmt.Errorf("find the data key of volume %s: %w", id, err)
	case !ok:
		return nil
	}
	status, err := b.host.Keys.Remove(staging, key)
	switch {
	case err != nil:
		return fmt.Errorf("remove the data key of volume %s from the keyring of %s: %w", id, staging, err)
	case status == fscrypt.IncompletelyRemoved:
		return answer.FailedPrecondition("the data key of volume %s is removed, but files under it are still open on this node and stay readable until closed; "+
			"close them (a process outside the pod may hold them) and retry the unstage", id)
	}
	klog.V(2).InfoS("removed the data key of an encrypted volume", "volumeID", id, "stagingPath", staging)
	return nil
}
