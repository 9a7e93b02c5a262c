package chartrender

import (
	"io"
	"path"
	"sort"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chartutil"
	kubefake "helm.sh/helm/v3/pkg/kube/fake"
	"helm.sh/helm/v3/pkg/storage"
	"helm.sh/helm/v3/pkg/storage/driver"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/version"
	"k8s.io/client-go/discovery"
	fakediscovery "k8s.io/client-go/discovery/fake"
	"k8s.io/client-go/rest"
	clienttesting "k8s.io/client-go/testing"
)

// The message templates/kubeversion.yaml fails with.
const tooOld = "filevol needs Kubernetes 1.28 or later; the cluster reports "

// clusterResources is what an API server's discovery lists for the kinds
// the chart makes, plus v1 Namespace, which every cluster serves:
// group/version -> kinds.
func clusterResources(t *testing.T) map[string][]string {
	t.Helper()
	kinds := map[string][]string{"v1": {"Namespace"}}
	for _, o := range render(t, "").Objects {
		kinds[o.APIVersion] = append(kinds[o.APIVersion], o.Kind)
	}
	return kinds
}

// apiVersionsFlag is the list a GitOps tool passes as --api-versions for a
// cluster (Argo CD passes group/versions and group/version/Kinds).
func apiVersionsFlag(t *testing.T) []string {
	var out []string
	for gv, kinds := range clusterResources(t) {
		out = append(out, gv)
		for _, k := range kinds {
			out = append(out, path.Join(gv, k))
		}
	}
	sort.Strings(out)
	return out
}

// fakeCluster is the RESTClientGetter of a helm that talks to an API server:
// discovery answers with gitVersion and the resources given. Helm's own code
// (Configuration.getCapabilities, GetVersionSet) turns that into
// .Capabilities, as it does on helm install.
type fakeCluster struct {
	gitVersion string
	resources  map[string][]string
}

// cachedFake adds the cache methods helm calls to the fake discovery.
type cachedFake struct{ *fakediscovery.FakeDiscovery }

func (cachedFake) Fresh() bool { return true }
func (cachedFake) Invalidate() {}

func (c fakeCluster) ToDiscoveryClient() (discovery.CachedDiscoveryInterface, error) {
	var lists []*metav1.APIResourceList
	for gv, kinds := range c.resources {
		l := &metav1.APIResourceList{GroupVersion: gv}
		for _, k := range kinds {
			l.APIResources = append(l.APIResources, metav1.APIResource{Name: strings.ToLower(k) + "s", Kind: k})
		}
		lists = append(lists, l)
	}
	minor := strings.Split(strings.TrimPrefix(c.gitVersion, "v"), ".")[1]
	return cachedFake{&fakediscovery.FakeDiscovery{
		Fake:               &clienttesting.Fake{Resources: lists},
		FakedServerVersion: &version.Info{Major: "1", Minor: minor, GitVersion: c.gitVersion},
	}}, nil
}

// ToRESTConfig is only used for the template function lookup, which the
// chart does not call; nothing connects to this address.
func (fakeCluster) ToRESTConfig() (*rest.Config, error) {
	return &rest.Config{Host: "https://127.0.0.1:1"}, nil
}

func (fakeCluster) ToRESTMapper() (meta.RESTMapper, error) { return nil, nil }

// installOn renders as `helm install --dry-run=server` against a cluster
// running gitVersion: capabilities come from the cluster's discovery, as on a
// real install (the dry run only stops before objects are created).
func installOn(t *testing.T, gitVersion string) error {
	t.Helper()
	dir, err := ChartDir()
	if err != nil {
		t.Fatal(err)
	}
	cfg := &action.Configuration{
		RESTClientGetter: fakeCluster{gitVersion: gitVersion, resources: clusterResources(t)},
		KubeClient:       &kubefake.PrintingKubeClient{Out: io.Discard},
		Releases:         storage.Init(driver.NewMemory()),
	}
	_, err = renderWith(dir, testRelease, testNamespace, "", cfg, func(i *action.Install) {
		i.ClientOnly = false
		i.DryRunOption = "server"
	})
	return err
}

// renderOffline renders client-only, as `helm template` with the given
// --kube-version ("": none) and --api-versions.
func renderOffline(t *testing.T, kubeVersion string, apiVersions []string) error {
	t.Helper()
	dir, err := ChartDir()
	if err != nil {
		t.Fatal(err)
	}
	var kv *chartutil.KubeVersion
	if kubeVersion != "" {
		if kv, err = chartutil.ParseKubeVersion(kubeVersion); err != nil {
			t.Fatal(err)
		}
	}
	_, err = renderWith(dir, testRelease, testNamespace, "", nil, func(i *action.Install) {
		if kv != nil {
			i.KubeVersion = kv
		}
		i.APIVersions = apiVersions
	})
	return err
}

// TestOfflineRenderDefaultCapabilities: plain `helm template` (no
// --kube-version) renders with the version compiled into helm. The SDK this
// module builds has no release ldflags, so that is v1.20.0, as in a helm
// built from source; Chart.yaml's kubeVersion made exactly this fail.
func TestOfflineRenderDefaultCapabilities(t *testing.T) {
	def := chartutil.DefaultCapabilities.KubeVersion.Version
	if !chartutil.IsCompatibleRange("<1.28.0-0", def) {
		t.Fatalf("the SDK's default Kubernetes version is %s: this test needs one below 1.28 to mean anything", def)
	}
	if err := renderOffline(t, "", nil); err != nil {
		t.Fatalf("helm template with the default capabilities (Kubernetes %s): %v", def, err)
	}
	// A lone --kube-version cannot be told from helm's default (old helm
	// releases assume 1.26 or 1.27), so it renders too.
	if err := renderOffline(t, "v1.27.0", nil); err != nil {
		t.Errorf("helm template --kube-version 1.27 without a cluster's API list: %v", err)
	}
}

// TestRefusesOldCluster: an install on a cluster below 1.28 fails, with a
// message naming the need and the cluster's version, before anything is
// created; 1.28 (provider suffixes included) and later install.
func TestRefusesOldCluster(t *testing.T) {
	for _, tc := range []struct {
		gitVersion string
		refused    bool
	}{
		{"v1.27.16-eks-a18cd3a", true},
		{"v1.20.0", true}, // helm's offline default, but here a cluster said so
		{"v1.28.0-gke.1200", false},
		{"v1.28.3+k3s1", false},
		{KubeVersion, false},
	} {
		err := installOn(t, tc.gitVersion)
		switch {
		case tc.refused && (err == nil || !strings.Contains(err.Error(), tooOld+tc.gitVersion)):
			t.Errorf("install on Kubernetes %s: error %v, want one containing %q", tc.gitVersion, err, tooOld+tc.gitVersion)
		case !tc.refused && err != nil:
			t.Errorf("install on Kubernetes %s: %v", tc.gitVersion, err)
		}
	}
}

// TestRefusesOldClusterGitOps: a tool that renders offline for a cluster,
// passing its version and API list (Argo CD), gets the same refusal.
func TestRefusesOldClusterGitOps(t *testing.T) {
	apis := apiVersionsFlag(t)
	err := renderOffline(t, "v1.27.3", apis)
	if err == nil || !strings.Contains(err.Error(), tooOld+"v1.27.3") {
		t.Errorf("template --kube-version 1.27.3 --api-versions <cluster>: error %v, want %q", err, tooOld+"v1.27.3")
	}
	if err := renderOffline(t, "v1.28.0", apis); err != nil {
		t.Errorf("template --kube-version 1.28.0 --api-versions <cluster>: %v", err)
	}
	// An API list without the cluster's core kinds (a user adding a CRD's
	// kind for some other chart's sake) is no cluster: no refusal.
	if err := renderOffline(t, "", []string{"monitoring.coreos.com/v1/ServiceMonitor"}); err != nil {
		t.Errorf("template --api-versions monitoring.coreos.com/v1/ServiceMonitor: %v", err)
	}
}
