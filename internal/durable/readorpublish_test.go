package durable

import (
	"path/filepath"
	"testing"
)

// The first call makes the file from fresh; later ones read it and never
// call fresh again.
func TestReadOrPublishMakesOnce(t *testing.T) {
	path := filepath.Join(t.TempDir(), "id.json")
	calls := 0
	fresh := func() ([]byte, error) { calls++; return []byte(`{"n":1}`), nil }
	for range 3 {
		data, err := ReadOrPublish(path, fresh)
		if err != nil || string(data) != `{"n":1}` {
			t.Fatalf("ReadOrPublish = %q, %v", data, err)
		}
	}
	if calls != 1 {
		t.Errorf("fresh called %d times, want 1", calls)
	}
}
