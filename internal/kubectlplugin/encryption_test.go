package kubectlplugin

import (
	"strings"
	"testing"

	"github.com/filevol/filevol/internal/nodeview/api"
)

func TestEncryptionStr(t *testing.T) {
	for _, c := range []struct {
		r    api.Record
		want string
	}{
		{api.Record{}, "none"},
		{api.Record{Encryption: "fscrypt"}, "fscrypt, no data key yet"},
		{api.Record{Encryption: "fscrypt", EncryptionKeyMade: true}, "fscrypt, data key wrapped"},
	} {
		if got := encryptionStr(c.r); !strings.HasPrefix(got, c.want) {
			t.Errorf("encryptionStr(%+v) = %q, want it to begin %q", c.r, got, c.want)
		}
	}
}
