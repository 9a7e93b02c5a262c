package nodeview

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/filevol/filevol/internal/keywrap"
	"github.com/filevol/filevol/internal/volume"
	"github.com/filevol/filevol/internal/volview"
)

// TestVolumeViewSaysEncryptedNeverTheKey: the node view says a volume is
// encrypted and whether its data key exists, and nothing of the wrapped
// key (its ciphertext, salt, nonce or check value) reaches the report.
func TestVolumeViewSaysEncryptedNeverTheKey(t *testing.T) {
	w := &keywrap.Wrapped{Version: 1, KeyName: "k", Salt: []byte("salt-bytes-0123"), Check: "check-value-4567",
		Nonce: []byte("nonce-bytes-89ab"), Ciphertext: []byte("ciphertext-bytes-cdef")}
	for _, c := range []struct {
		name      string
		enc       *volume.Encryption
		scheme    string
		keyMade   bool
		forbidden []string
	}{
		{"clear", nil, "", false, nil},
		{"blank", &volume.Encryption{Scheme: volume.EncryptionFscrypt}, "fscrypt", false, nil},
		{"staged once", &volume.Encryption{Scheme: volume.EncryptionFscrypt, Wrapped: w}, "fscrypt", true,
			[]string{"salt-bytes", "check-value", "nonce-bytes", "ciphertext-bytes", "c2FsdC1ieXRlcy"}},
	} {
		v := volumeView(volume.Volume{ID: "fv1-x", Encryption: c.enc}, "/pool/volumes/fv1-x.img", volview.Usage{})
		if v.Record.Encryption != c.scheme || v.Record.EncryptionKeyMade != c.keyMade {
			t.Errorf("%s: encryption %q, key made %v; want %q, %v", c.name, v.Record.Encryption, v.Record.EncryptionKeyMade, c.scheme, c.keyMade)
		}
		out, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range c.forbidden {
			if strings.Contains(string(out), f) {
				t.Errorf("%s: the report holds %q of the wrapped key: %s", c.name, f, out)
			}
		}
	}
}
