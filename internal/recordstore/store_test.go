package recordstore

import (
	"errors"
	"fmt"
	"os"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// rec is a record as the pool's are: a version, an ID, and fields of every
// kind a record holds.
type rec struct {
	Version int               `json:"version"`
	ID      string            `json:"id"`
	Name    string            `json:"name"`
	Size    int64             `json:"size"`
	Flag    bool              `json:"flag,omitempty"`
	Tags    map[string]string `json:"tags,omitempty"`
	Src     *src              `json:"src,omitempty"`
	At      time.Time         `json:"at"`
}

type src struct{ Kind, ID string }

func (r rec) RecordID() string   { return r.ID }
func (r rec) RecordVersion() int { return r.Version }

var (
	errNotFound = errors.New("not found")
	errExists   = errors.New("exists")
)

func validTestID(id string) error {
	if id == "" || !strings.HasPrefix(id, "r-") || strings.ContainsAny(id, "/.\x00") {
		return fmt.Errorf("invalid ID %q", id)
	}
	return nil
}

func openStore(t *testing.T, dir string) *Store[rec] {
	t.Helper()
	s, err := Open(Config[rec]{Dir: dir, Kind: "thing", Version: 1, Valid: validTestID,
		NotFound: errNotFound, Exists: errExists, Weight: func(r rec) int64 { return r.Size }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func newRec(id string, size int64) rec {
	return rec{Version: 1, ID: id, Name: "name of " + id, Size: size, Tags: map[string]string{"k": "v"},
		At: time.Unix(1700000000, 0).UTC()}
}

func names(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	return out
}

func create(t *testing.T, s *Store[rec], r rec) {
	t.Helper()
	d, err := s.Prepare(r)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Commit(); err != nil {
		d.Abandon()
		t.Fatal(err)
	}
	if err := d.Durable(); err != nil {
		d.Abandon()
		t.Fatal(err)
	}
}

func TestCreateGetListRemove(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir)
	for _, id := range []string{"r-3", "r-1", "r-2"} {
		create(t, s, newRec(id, int64(id[2]-'0')))
	}
	if got := names(t, dir); !slices.Equal(got, []string{"r-1.json", "r-2.json", "r-3.json"}) {
		t.Fatalf("directory holds %v, want one <id>.json per record and nothing else", got)
	}
	l := s.List()
	if len(l) != 3 || l[0].ID != "r-1" || l[2].ID != "r-3" || s.Total() != 6 {
		t.Fatalf("List = %+v, Total %d", l, s.Total())
	}
	l[0].Name = "changed by the caller"
	if s.List()[0].Name != "name of r-1" {
		t.Error("a caller changed the index through List's result")
	}
	got, err := s.Get("r-2")
	if err != nil || !reflect.DeepEqual(got, newRec("r-2", 2)) {
		t.Fatalf("Get = %+v, %v", got, err)
	}
	if _, err := s.Get("r-9"); !errors.Is(err, errNotFound) {
		t.Errorf("Get of a missing record = %v, want NotFound", err)
	}
	if _, err := s.Get("../x"); err == nil || errors.Is(err, errNotFound) {
		t.Errorf("Get of an invalid ID = %v, want Valid's error", err)
	}

	// A create of an ID that has a record commits nothing and keeps it.
	d, err := s.Prepare(newRec("r-2", 99))
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Commit(); !errors.Is(err, errExists) {
		t.Fatalf("Commit over a record = %v, want Exists", err)
	}
	d.Abandon()
	if got, _ := s.Get("r-2"); got.Size != 2 {
		t.Errorf("a duplicate create replaced the record: %+v", got)
	}
	if got := names(t, dir); len(got) != 3 {
		t.Errorf("an abandoned create left %v", got)
	}

	// Replace changes it in place, index and total included.
	r := newRec("r-2", 20)
	if err := s.Replace(r); err != nil {
		t.Fatal(err)
	}
	if c, _ := s.Cached("r-2"); c.Size != 20 || s.Total() != 24 {
		t.Errorf("after Replace: %+v, Total %d", c, s.Total())
	}

	// Remove, then a remove of nothing.
	m := s.Mark()
	if err := s.Remove("r-2"); err != nil {
		t.Fatal(err)
	}
	if err := s.Remove("r-2"); err != nil {
		t.Errorf("second Remove: %v", err)
	}
	if err := s.Synced(m); err != nil {
		t.Fatal(err)
	}
	if s.Has("r-2") || s.Total() != 4 || len(s.List()) != 2 {
		t.Errorf("after Remove: has %v, Total %d, List %v", s.Has("r-2"), s.Total(), s.List())
	}

	// Abandon after a commit undoes it.
	d, err = s.Prepare(newRec("r-5", 5))
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Commit(); err != nil {
		t.Fatal(err)
	}
	d.Abandon()
	if _, err := os.Stat(s.Path("r-5")); !os.IsNotExist(err) || s.Has("r-5") {
		t.Errorf("Abandon after Commit left the record: %v, indexed %v", err, s.Has("r-5"))
	}

	// Only records of this version and ID are written.
	if _, err := s.Prepare(rec{Version: 2, ID: "r-6"}); err == nil {
		t.Error("Prepare wrote a record of another version")
	}
}

// The index refreshes on any change to a record, whatever field it is in:
// a field-by-field compare once missed one and kept a stale copy.
func TestIndexSeesEveryField(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir)
	base := newRec("r-1", 1)
	create(t, s, base)
	s.List() // builds the sorted cache
	if _, err := s.Get("r-1"); err != nil {
		t.Fatal(err)
	}
	if s.idx.sorted == nil {
		t.Error("a Get of an unchanged record dropped the sorted cache")
	}
	changes := map[string]func(*rec){
		"Name": func(r *rec) { r.Name = "other" },
		"Size": func(r *rec) { r.Size = 7 },
		"Flag": func(r *rec) { r.Flag = true },
		"Tags": func(r *rec) { r.Tags = map[string]string{"k": "w"} },
		"Src":  func(r *rec) { r.Src = &src{Kind: "snapshot", ID: "x"} },
		"At":   func(r *rec) { r.At = r.At.Add(time.Second) },
	}
	typ := reflect.TypeOf(rec{})
	for i := range typ.NumField() {
		f := typ.Field(i).Name
		if f == "Version" || f == "ID" {
			continue // the header: a change there is refused, not indexed
		}
		change, ok := changes[f]
		if !ok {
			t.Errorf("field %s has no change in this test: add one", f)
			continue
		}
		// Another process rewrites the record: first as it was, then with
		// the one field changed.
		want := base
		want.Tags = map[string]string{"k": "v"}
		change(&want)
		for _, r := range []rec{base, want} {
			data, err := Encode(r)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(s.Path("r-1"), data, 0o600); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Get("r-1"); err != nil {
				t.Fatal(err)
			}
			s.List() // the sorted cache, which a change must drop
		}
		if got := s.List()[0]; !reflect.DeepEqual(got, want) {
			t.Errorf("after a change of %s the index holds %+v, want %+v", f, got, want)
		}
		if want.Size != s.Total() {
			t.Errorf("after a change of %s Total is %d, want %d", f, s.Total(), want.Size)
		}
	}
}

func TestDecodeRefuses(t *testing.T) {
	good, _ := Encode(newRec("r-1", 1))
	if _, err := Decode[rec]("p", "thing", "r-1", 1, good); err != nil {
		t.Fatalf("good record refused: %v", err)
	}
	for name, c := range map[string]struct {
		id      string
		version int
		data    []byte
		say     string
	}{
		"other version": {"r-1", 2, good, "version 1, this filevol reads version 2"},
		"other ID":      {"r-2", 1, good, `holds thing ID "r-1"`},
		"not JSON":      {"r-1", 1, good[:len(good)/2], "record p"},
	} {
		if _, err := Decode[rec]("p", "thing", c.id, c.version, c.data); err == nil || !strings.Contains(err.Error(), c.say) {
			t.Errorf("%s: Decode = %v, want an error saying %q", name, err, c.say)
		}
	}
}

// Load indexes what it can read, leaves what it cannot, hands back the
// names it does not own, and removes unpublished records only when it
// repairs.
func TestLoad(t *testing.T) {
	dir := t.TempDir()
	create(t, openStore(t, dir), newRec("r-1", 1))
	files := map[string]string{
		"r-2.json":             `{"version":9,"id":"r-2"}`, // another version: unreadable here
		".tmp-r-3.json.abc123": `{"version":1,"id":"r-3"}`, // never published
		"r-1.img":              "",                         // the caller's
		".tmp-r-4.img":         "",                         // the caller's
		"notes.txt":            "",                         // an operator's
	}
	for name, data := range files {
		if err := os.WriteFile(dir+"/"+name, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	s := openStore(t, dir)
	sc, err := s.Load(false)
	if err != nil {
		t.Fatal(err)
	}
	if len(sc.Loaded) != 1 || sc.Loaded[0].ID != "r-1" || !sc.Records["r-2"] || !sc.Records["r-1"] || len(sc.Records) != 2 {
		t.Errorf("Load: loaded %v, records %v", sc.Loaded, sc.Records)
	}
	slices.Sort(sc.Others)
	if want := []string{".tmp-r-4.img", "notes.txt", "r-1.img"}; !slices.Equal(sc.Others, want) {
		t.Errorf("Others = %v, want %v", sc.Others, want)
	}
	if !slices.Equal(sc.TempRecords, []string{".tmp-r-3.json.abc123"}) {
		t.Errorf("TempRecords = %v", sc.TempRecords)
	}
	if _, err := os.Stat(dir + "/.tmp-r-3.json.abc123"); err != nil {
		t.Errorf("Load without repair touched a temporary record: %v", err)
	}
	if s.Has("r-2") || !s.Has("r-1") {
		t.Error("index holds the unreadable record, or lacks the good one")
	}
	if _, err := openStore(t, dir).Load(true); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir + "/.tmp-r-3.json.abc123"); !os.IsNotExist(err) {
		t.Errorf("Load with repair left the temporary record: %v", err)
	}
	if _, err := os.Stat(dir + "/r-2.json"); err != nil {
		t.Errorf("Load removed an unreadable record: %v", err)
	}
}

// On a directory several hosts share, a store writes its temporary
// records under its owner's tag and repairs those only: another owner's is
// a write in flight (on another host, whose locks this one may not see),
// and an untagged one has no known owner. A store without an owner (a
// node-local pool, repaired by whoever holds it alone) repairs them all.
func TestLoadRepairsOnlyItsOwnersTemporaryRecords(t *testing.T) {
	dir := t.TempDir()
	owned := func(owner string) *Store[rec] {
		s, err := Open(Config[rec]{Dir: dir, Kind: "thing", Version: 1, Valid: validTestID,
			NotFound: errNotFound, Exists: errExists, Owner: owner})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
	a, b := owned("aaaa"), owned("bbbb")
	// a's write in flight: prepared, not committed.
	d, err := a.Prepare(newRec("r-1", 1))
	if err != nil {
		t.Fatal(err)
	}
	inflight := strings.TrimPrefix(d.tmp, dir+"/")
	if !strings.HasPrefix(inflight, ".tmp-r-1@aaaa.json.") {
		t.Fatalf("a's temporary record is %s, want it tagged with a's key", inflight)
	}
	for _, name := range []string{".tmp-r-2@bbbb.json.x1", ".tmp-r-3.json.x2"} {
		if err := os.WriteFile(dir+"/"+name, []byte("{"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	sc, err := b.Load(true)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(sc.TempRecords)
	if want := []string{inflight, ".tmp-r-2@bbbb.json.x1", ".tmp-r-3.json.x2"}; !slices.Equal(sc.TempRecords, want) {
		t.Errorf("TempRecords = %v, want every owner's: %v", sc.TempRecords, want)
	}
	if got := names(t, dir); !slices.Equal(got, []string{inflight, ".tmp-r-3.json.x2"}) {
		t.Errorf("after b's repair the directory holds %v, want a's write in flight and the untagged one", got)
	}
	if err := d.Commit(); err != nil {
		t.Fatalf("a's write, after b's repair: %v", err)
	}
	if _, err := owned("").Load(true); err != nil {
		t.Fatal(err)
	}
	if got := names(t, dir); !slices.Equal(got, []string{"r-1.json"}) {
		t.Errorf("after a repair without owner the directory holds %v, want the committed record only", got)
	}
}

// Two creates of one ID racing (two processes sharing the directory):
// exactly one commits; many of distinct IDs all do.
func TestConcurrentCreates(t *testing.T) {
	dir := t.TempDir()
	a, b := openStore(t, dir), openStore(t, dir)
	var wg sync.WaitGroup
	var mu sync.Mutex
	won := 0
	for i := range 16 {
		wg.Go(func() {
			s := a
			if i%2 == 1 {
				s = b
			}
			d, err := s.Prepare(newRec("r-same", int64(i)))
			if err != nil {
				t.Error(err)
				return
			}
			if err := d.Commit(); err != nil {
				d.Abandon()
				if !errors.Is(err, errExists) {
					t.Error(err)
				}
			} else if err := d.Durable(); err != nil {
				t.Error(err)
			} else {
				mu.Lock()
				won++
				mu.Unlock()
			}
			create(t, s, newRec(fmt.Sprintf("r-%d", i), 1))
		})
	}
	wg.Wait()
	if won != 1 {
		t.Errorf("%d creates of one ID committed, want 1", won)
	}
	if got := len(names(t, dir)); got != 17 {
		t.Errorf("directory holds %d files, want 17 records and no temporary file", got)
	}
}

// TestRefreshSeesAnotherProcesssChanges: two stores on one directory (two
// processes sharing a pool). Each index knows its own changes only; after
// Refresh, b's index is the directory's: a's new record in, a's deleted
// record out, a's changed record as a wrote it.
func TestRefreshSeesAnotherProcesssChanges(t *testing.T) {
	dir := t.TempDir()
	a := openStore(t, dir)
	create(t, a, newRec("r-1", 1))
	create(t, a, newRec("r-2", 2))
	b := openStore(t, dir)
	if _, err := b.Load(false); err != nil {
		t.Fatal(err)
	}
	create(t, a, newRec("r-3", 3))
	if err := a.Remove("r-1"); err != nil {
		t.Fatal(err)
	}
	if err := a.Replace(newRec("r-2", 20)); err != nil {
		t.Fatal(err)
	}
	if l := b.List(); len(l) != 2 || l[0].ID != "r-1" {
		t.Fatalf("before Refresh b lists %+v; want its stale view (r-1, r-2)", l)
	}
	if err := b.Refresh(); err != nil {
		t.Fatal(err)
	}
	l := b.List()
	if len(l) != 2 || l[0].ID != "r-2" || l[1].ID != "r-3" || b.Total() != 23 {
		t.Fatalf("after Refresh b lists %+v, total %d; want r-2 (size 20) and r-3, total 23", l, b.Total())
	}
}
