package chartrender

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

const socket = "/var/lib/kubelet/plugins/filevol.csi.io/csi.sock"

func TestNodeDaemonSetDefaults(t *testing.T) {
	r := render(t, "")
	ds := daemonSet(t, r)
	spec := &ds.Spec.Template.Spec

	if got, want := containerNames(spec), []string{"filevol", "csi-provisioner", "csi-snapshotter", "node-driver-registrar", "liveness-probe"}; !slices.Equal(got, want) {
		t.Fatalf("containers %v, want %v", got, want)
	}
	images := map[string]string{
		"filevol":               "ghcr.io/filevol/filevol:v0.1.0",
		"csi-provisioner":       "registry.k8s.io/sig-storage/csi-provisioner:v6.3.0",
		"csi-snapshotter":       "registry.k8s.io/sig-storage/csi-snapshotter:v8.7.0",
		"node-driver-registrar": "registry.k8s.io/sig-storage/csi-node-driver-registrar:v2.18.0",
		"liveness-probe":        "registry.k8s.io/sig-storage/livenessprobe:v2.20.0",
	}
	for _, c := range spec.Containers {
		if c.Image != images[c.Name] {
			t.Errorf("%s: image %s, want %s", c.Name, c.Image, images[c.Name])
		}
		if c.ImagePullPolicy != corev1.PullIfNotPresent {
			t.Errorf("%s: pull policy %s", c.Name, c.ImagePullPolicy)
		}
	}
	if spec.HostNetwork || spec.HostPID || spec.HostIPC {
		t.Errorf("host namespaces: network %v pid %v ipc %v", spec.HostNetwork, spec.HostPID, spec.HostIPC)
	}
	if spec.ServiceAccountName != nodeName {
		t.Errorf("serviceAccountName %s", spec.ServiceAccountName)
	}

	// Exactly these host directories, nothing else.
	wantHost := map[string]string{
		"socket-dir":       "/var/lib/kubelet/plugins/filevol.csi.io DirectoryOrCreate",
		"kubelet-plugins":  "/var/lib/kubelet/plugins Directory",
		"kubelet-pods":     "/var/lib/kubelet/pods Directory",
		"registration-dir": "/var/lib/kubelet/plugins_registry Directory",
		"pool":             "/var/lib/filevol/pool DirectoryOrCreate",
		"dev":              "/dev Directory",
		"cgroup":           "/sys/fs/cgroup Directory",
	}
	if got := hostPaths(spec); fmt.Sprint(got) != fmt.Sprint(wantHost) || len(spec.Volumes) != len(wantHost) {
		t.Errorf("host paths %v, want %v (volumes %d)", got, wantHost, len(spec.Volumes))
	}

	fv := container(t, spec, "filevol")
	if !privileged(fv) {
		t.Error("filevol is not privileged")
	}
	for vol, want := range map[string]string{
		"kubelet-plugins": "/var/lib/kubelet/plugins Bidirectional",
		"kubelet-pods":    "/var/lib/kubelet/pods Bidirectional",
		"pool":            "/var/lib/filevol/pool ",
		"dev":             "/dev ",
		"cgroup":          "/host/cgroup ",
	} {
		m := mount(fv, vol)
		if m == nil {
			t.Errorf("filevol does not mount %s", vol)
			continue
		}
		if got := m.MountPath + " " + propagation(m); got != want {
			t.Errorf("filevol mount %s: %q, want %q", vol, got, want)
		}
	}
	if got := mountNames(fv); !slices.Equal(got, []string{"cgroup", "dev", "kubelet-plugins", "kubelet-pods", "pool"}) {
		t.Errorf("filevol mounts %v (registration-dir belongs to the registrar sidecar)", got)
	}
	wantArg(t, fv, "--mode", "all")
	wantArg(t, fv, "--endpoint", "unix://"+socket)
	// The host's cgroups, to enforce volume I/O limits in the pods' cgroups.
	wantArg(t, fv, "--cgroup-roots", "/host/cgroup/blkio,/host/cgroup")
	wantArg(t, fv, "--node-id", "$(NODE_NAME)")
	wantArg(t, fv, "--pool-dir", "/var/lib/filevol/pool")
	wantArg(t, fv, "--kubelet-dir", "/var/lib/kubelet")
	wantArg(t, fv, "--driver-name", "filevol.csi.io")
	noArg(t, fv, "--registration-dir")
	wantArg(t, fv, "--http-endpoint", "0.0.0.0:9808") // /metrics and /debug/volumes in every mode
	if fieldRefEnv(fv, "NODE_NAME") != "spec.nodeName" {
		t.Error("filevol: NODE_NAME is not spec.nodeName")
	}

	// Sidecars: socket directory only, unprivileged, never Bidirectional.
	for _, c := range spec.Containers[1:] {
		unprivileged(t, &c)
		want := []string{"socket-dir"}
		if c.Name == "node-driver-registrar" {
			want = []string{"registration-dir", "socket-dir"}
		}
		if got := mountNames(&c); !slices.Equal(got, want) {
			t.Errorf("%s mounts %v, want %v", c.Name, got, want)
		}
		if m := mount(&c, "socket-dir"); m == nil || m.MountPath != "/csi" || propagation(m) != "" {
			t.Errorf("%s: socket-dir mount %+v", c.Name, m)
		}
		wantArg(t, &c, "--csi-address", "/csi/csi.sock")
		wantArg(t, &c, "--v", "2")
	}

	p := container(t, spec, "csi-provisioner")
	for _, a := range []string{"--node-deployment", "--enable-capacity", "--strict-topology", "--extra-create-metadata"} {
		wantArg(t, p, a, "")
	}
	wantArg(t, p, "--capacity-ownerref-level", "1")
	wantArg(t, p, "--immediate-topology", "false")
	noArg(t, p, "--leader-election")
	for env, path := range map[string]string{"NODE_NAME": "spec.nodeName", "NAMESPACE": "metadata.namespace", "POD_NAME": "metadata.name"} {
		if got := fieldRefEnv(p, env); got != path {
			t.Errorf("provisioner env %s from %q, want %q", env, got, path)
		}
	}

	s := container(t, spec, "csi-snapshotter")
	wantArg(t, s, "--node-deployment", "")
	noArg(t, s, "--leader-election")
	if fieldRefEnv(s, "NODE_NAME") != "spec.nodeName" {
		t.Error("snapshotter: NODE_NAME is not spec.nodeName")
	}

	reg := container(t, spec, "node-driver-registrar")
	wantArg(t, reg, "--kubelet-registration-path", socket)
	wantArg(t, reg, "--http-endpoint", "0.0.0.0:9809")
	if m := mount(reg, "registration-dir"); m == nil || m.MountPath != "/registration" {
		t.Errorf("registrar: registration-dir mount %+v", m)
	}
	if reg.LivenessProbe == nil || reg.LivenessProbe.HTTPGet.Port.String() != "registrar-hz" {
		t.Error("registrar has no /healthz liveness probe")
	}
	// The socket kubelet is told about is the one filevol listens on.
	if got := hostPaths(spec)["socket-dir"]; !strings.HasPrefix(got, strings.TrimSuffix(socket, "/csi.sock")+" ") {
		t.Errorf("socket-dir %s does not hold %s", got, socket)
	}
	lp := container(t, spec, "liveness-probe")
	wantArg(t, lp, "--http-endpoint", "0.0.0.0:9810")
	// kubelet probes the filevol container through the sidecar's port.
	if fv.LivenessProbe == nil || fv.LivenessProbe.HTTPGet.Path != "/healthz" || fv.LivenessProbe.HTTPGet.Port.IntValue() != 9810 {
		t.Errorf("filevol liveness probe %+v", fv.LivenessProbe)
	}
	if fv.Ports[0].Name != "http" || fv.Ports[0].ContainerPort != 9808 {
		t.Errorf("filevol ports %+v", fv.Ports)
	}
	if ds.Spec.Template.Spec.PriorityClassName != "system-node-critical" {
		t.Errorf("priority class %q", ds.Spec.Template.Spec.PriorityClassName)
	}
}

// TestRegistrarAndProbeModes renders the four combinations of the two
// switches: each feature is served exactly once, by the chosen side.
func TestRegistrarAndProbeModes(t *testing.T) {
	for _, reg := range []string{"builtin", "sidecar"} {
		for _, probe := range []string{"builtin", "sidecar"} {
			t.Run(reg+"-"+probe, func(t *testing.T) {
				r := render(t, fmt.Sprintf("registrar: %s\nlivenessProbe: %s\n", reg, probe))
				spec := &daemonSet(t, r).Spec.Template.Spec
				fv := container(t, spec, "filevol")
				if reg == "builtin" {
					wantArg(t, fv, "--registration-dir", "/var/lib/kubelet/plugins_registry")
					if m := mount(fv, "registration-dir"); m == nil || m.MountPath != "/var/lib/kubelet/plugins_registry" {
						t.Errorf("filevol: registration-dir mount %+v", m)
					}
					if hasContainer(spec, "node-driver-registrar") {
						t.Error("registrar sidecar present with registrar=builtin")
					}
					noArg(t, fv, "--kubelet-registration-path") // defaults to the endpoint, which is the host path
				} else {
					noArg(t, fv, "--registration-dir")
					if mount(fv, "registration-dir") != nil {
						t.Error("filevol mounts plugins_registry with registrar=sidecar")
					}
					container(t, spec, "node-driver-registrar")
				}
				ctrl := &deployment(t, r).Spec.Template.Spec
				cfv := container(t, ctrl, "filevol")
				// filevol always serves its endpoint; kubelet probes filevol's
				// /healthz or the sidecar's, on the filevol container.
				wantArg(t, fv, "--http-endpoint", "0.0.0.0:9808")
				wantArg(t, cfv, "--http-endpoint", "0.0.0.0:9811")
				nodeProbe, ctrlProbe := 9808, 9811
				if probe == "builtin" {
					if hasContainer(spec, "liveness-probe") || hasContainer(ctrl, "liveness-probe") {
						t.Error("livenessprobe sidecar present with livenessProbe=builtin")
					}
				} else {
					nodeProbe, ctrlProbe = 9810, 9812
					wantArg(t, container(t, spec, "liveness-probe"), "--http-endpoint", "0.0.0.0:9810")
					wantArg(t, container(t, ctrl, "liveness-probe"), "--http-endpoint", "0.0.0.0:9812")
				}
				if got := fv.LivenessProbe.HTTPGet.Port.IntValue(); got != nodeProbe {
					t.Errorf("node pod probed on %d, want %d", got, nodeProbe)
				}
				if got := cfv.LivenessProbe.HTTPGet.Port.IntValue(); got != ctrlProbe {
					t.Errorf("controller pod probed on %d, want %d", got, ctrlProbe)
				}
			})
		}
	}
}

func TestKubeletDirAndPool(t *testing.T) {
	r := render(t, "kubeletDir: /data/kubelet/\npool: {hostPath: /srv/filevol, reservedCapacity: 10Gi}\nregistrar: builtin\nmaxVolumesPerNode: 50\n")
	if strings.Contains(r.Manifest, "/var/lib/kubelet") || strings.Contains(r.Manifest, "/var/lib/filevol") {
		t.Error("a default path is left in the manifest")
	}
	if strings.Contains(r.Manifest, "kubelet//") {
		t.Error("the trailing slash of kubeletDir leaks into paths")
	}
	spec := &daemonSet(t, r).Spec.Template.Spec
	hp := hostPaths(spec)
	for vol, want := range map[string]string{
		"socket-dir":       "/data/kubelet/plugins/filevol.csi.io DirectoryOrCreate",
		"kubelet-plugins":  "/data/kubelet/plugins Directory",
		"kubelet-pods":     "/data/kubelet/pods Directory",
		"registration-dir": "/data/kubelet/plugins_registry Directory",
		"pool":             "/srv/filevol DirectoryOrCreate",
	} {
		if hp[vol] != want {
			t.Errorf("%s: %q, want %q", vol, hp[vol], want)
		}
	}
	fv := container(t, spec, "filevol")
	wantArg(t, fv, "--kubelet-dir", "/data/kubelet")
	wantArg(t, fv, "--endpoint", "unix:///data/kubelet/plugins/filevol.csi.io/csi.sock")
	wantArg(t, fv, "--registration-dir", "/data/kubelet/plugins_registry")
	wantArg(t, fv, "--pool-dir", "/srv/filevol")
	wantArg(t, fv, "--reserved-capacity", "10Gi")
	wantArg(t, fv, "--max-volumes-per-node", "50")
	if m := mount(fv, "pool"); m.MountPath != "/srv/filevol" {
		t.Errorf("pool mounted at %s, want the host path", m.MountPath)
	}
}

func TestNodeScheduling(t *testing.T) {
	r := render(t, `
node:
  nodeSelector: {disk: big}
  tolerations: [{operator: Exists}]
  priorityClassName: ""
  podAnnotations: {a: b}
  maxUnavailable: 10%
`)
	ds := daemonSet(t, r)
	spec := &ds.Spec.Template.Spec
	if fmt.Sprint(spec.NodeSelector) != "map[disk:big kubernetes.io/os:linux]" {
		t.Errorf("nodeSelector %v (values merge over the default)", spec.NodeSelector)
	}
	if len(spec.Tolerations) != 1 || spec.Tolerations[0].Operator != corev1.TolerationOpExists {
		t.Errorf("tolerations %+v", spec.Tolerations)
	}
	if ds.Spec.Template.Annotations["a"] != "b" {
		t.Errorf("annotations %v", ds.Spec.Template.Annotations)
	}
	if ds.Spec.UpdateStrategy.RollingUpdate.MaxUnavailable.String() != "10%" {
		t.Errorf("maxUnavailable %v", ds.Spec.UpdateStrategy.RollingUpdate.MaxUnavailable)
	}
}

// TestHostNetworkAPIServer is the e2e cluster's shape: no kube-proxy, the
// API server on the host's 127.0.0.1.
func TestHostNetworkAPIServer(t *testing.T) {
	r := render(t, `
apiServer: {host: 127.0.0.1, port: 6443}
node: {hostNetwork: true}
controller: {hostNetwork: true}
`)
	for _, spec := range []*corev1.PodSpec{&daemonSet(t, r).Spec.Template.Spec, &deployment(t, r).Spec.Template.Spec} {
		if !spec.HostNetwork || spec.DNSPolicy != corev1.DNSClusterFirstWithHostNet {
			t.Errorf("hostNetwork %v dnsPolicy %s", spec.HostNetwork, spec.DNSPolicy)
		}
		for _, c := range spec.Containers {
			host, ok := envValue(&c, "KUBERNETES_SERVICE_HOST")
			port, _ := envValue(&c, "KUBERNETES_SERVICE_PORT")
			talksToAPI := c.Name != "node-driver-registrar" && c.Name != "liveness-probe"
			if talksToAPI != ok || (ok && (host != "127.0.0.1" || port != "6443")) {
				t.Errorf("%s: API server env %q:%q (set %v), want set only on API clients", c.Name, host, port, ok)
			}
			if v, ok := arg(&c, "--http-endpoint"); ok && !strings.HasPrefix(v, "127.0.0.1:") {
				t.Errorf("%s: health endpoint %s is not on loopback", c.Name, v)
			}
			if p := c.LivenessProbe; p != nil && p.HTTPGet.Host != "127.0.0.1" {
				t.Errorf("%s: probe host %q", c.Name, p.HTTPGet.Host)
			}
		}
	}
	// A surge pod would need the host ports its predecessor still holds
	// (the e2e chart upgrade hung on exactly that).
	if ru := deployment(t, r).Spec.Strategy.RollingUpdate; ru == nil || ru.MaxSurge.String() != "0" || ru.MaxUnavailable.String() != "1" {
		t.Errorf("host-network controller rolling update %+v, want maxSurge 0, maxUnavailable 1", ru)
	}
	if ru := deployment(t, render(t, "")).Spec.Strategy.RollingUpdate; ru == nil || ru.MaxSurge.String() != "1" || ru.MaxUnavailable.String() != "0" {
		t.Errorf("pod-network controller rolling update %+v, want maxSurge 1, maxUnavailable 0", ru)
	}
	for values, want := range map[string]string{
		"apiServer: {host: 127.0.0.1}\n":                                                    "node.hostNetwork=true",
		"apiServer: {host: 127.0.0.1}\nnode: {hostNetwork: true}\n":                         "controller.hostNetwork=true",
		"node: {hostNetwork: true}\ncontroller: {hostNetwork: true, ports: {http: 9808}}\n": "must differ",
		"node: {ports: {livenessProbe: 9809}}\n":                                            "must differ",
		"controller: {ports: {http: 9900, livenessProbe: 9900}}\n":                          "must differ",
	} {
		if err := renderErr(t, values); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("values %q: error %v, want one containing %q", values, err, want)
		}
	}
}
