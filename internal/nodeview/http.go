package nodeview

import (
	"encoding/json"
	"net/http"

	"github.com/filevol/filevol/internal/nodeview/api"
)

// Handler serves the view as JSON at api.Path: GET or HEAD only, never a
// change. ?volume=ID or ?pv=NAME narrow it to matching volumes (the pool
// and quarantine parts stay). The report holds paths, names and sizes, no
// secrets (CreateVolume secrets are never recorded).
func (b *Builder) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "read-only endpoint", http.StatusMethodNotAllowed)
			return
		}
		rep := b.Build(r.Context(), true)
		id, pv := r.URL.Query().Get(api.QueryVolume), r.URL.Query().Get(api.QueryPV)
		if id != "" || pv != "" {
			kept := []api.Volume{}
			for _, v := range rep.Volumes {
				if (id == "" || v.Record.ID == id) && (pv == "" || v.PV == pv) {
					kept = append(kept, v)
				}
			}
			rep.Volumes = kept
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(rep)
	})
}
