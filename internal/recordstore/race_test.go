package recordstore

import (
	"sync"
	"testing"
)

// A Get of another caller (a sweep reading every record while a delete
// runs) that read a record's file just before Remove unlinked it must not
// put it back in the index after Remove took it out: List would then show
// a record that is gone, for good (a directory snapshot csi-sanity had
// deleted was still listed after it, now and then).
func TestGetNeverIndexesARemovedRecord(t *testing.T) {
	s := openStore(t, t.TempDir())
	for i := range 3000 {
		create(t, s, newRec("r-1", int64(i)))
		stop := make(chan struct{})
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
					_, _ = s.Get("r-1")
				}
			}
		}()
		if err := s.Remove("r-1"); err != nil {
			t.Fatal(err)
		}
		close(stop)
		wg.Wait()
		if s.Has("r-1") {
			t.Fatalf("round %d: the index holds r-1 after Remove", i)
		}
	}
}
