package chartrender

import (
	"strings"
	"testing"
)

// TestSchemaRejects: values.schema.json turns typos and impossible values
// into install errors that name the offending key.
func TestSchemaRejects(t *testing.T) {
	for _, tc := range []struct{ values, want string }{
		{"registar: builtin\n", "registar"},
		{"pool: {hostpath: /srv}\n", "hostpath"},
		{"image: {filevol: {repo: x}}\n", "repo"},
		{"node: {tolerations: [{key: a, operater: Exists}]}\n", "operater"},
		{"node: {resources: {filevol: {request: {cpu: 1}}}}\n", "request"},
		{"controller: {replica: 2}\n", "replica"},
		{"snapshots: {enable: false}\n", "enable"},
		{"storageClasses: [{name: a, fstype: xfs}]\n", "fstype"},
		{"registrar: both\n", "registrar"},
		{"livenessProbe: true\n", "livenessProbe"},
		{"logLevel: high\n", "logLevel"},
		{"storageClasses: [{name: a, fsType: ext3}]\n", "fsType"},
		{"storageClasses: [{fsType: xfs}]\n", "name"},
		{"storageClasses: [{name: Fast_SSD}]\n", "name"},
		{"storageClasses: [{name: a, volumeBindingMode: Later}]\n", "volumeBindingMode"},
		{"pool: {hostPath: relative/dir}\n", "hostPath"},
		{"pool: {hostPath: /}\n", "hostPath"},
		{"kubeletDir: /var/lib/../kubelet\n", "kubeletDir"},
		{"pool: {reservedCapacity: 10GB}\n", "reservedCapacity"},
		{"controller: {replicas: 0}\n", "replicas"},
		{"node: {ports: {http: 70000}}\n", "http"},
		{"node: {ports: {htpp: 9808}}\n", "htpp"},
		{"pool: {shared: yes-please}\n", "shared"},
		{"driverName: Filevol.CSI.io\n", "driverName"},
		{"image: {provisioner: {pullPolicy: Sometimes}}\n", "pullPolicy"},
		{"snapshots: {volumeSnapshotClass: {deletionPolicy: Keep}}\n", "deletionPolicy"},
		{"storageClasses: [{name: a}, {name: a}]\n", "listed twice"},
	} {
		err := renderErr(t, tc.values)
		if err == nil {
			t.Errorf("values %q: accepted", tc.values)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("values %q: error does not name %q:\n%v", tc.values, tc.want, err)
		}
	}
}

// TestSchemaAccepts: what users legitimately write, including --set's
// integers for sizes.
func TestSchemaAccepts(t *testing.T) {
	for _, values := range []string{
		"pool: {reservedCapacity: 0}\n",
		"pool: {reservedCapacity: 500Mi}\n",
		"storageClasses: []\n",
		"node: {tolerations: [{key: x, operator: Equal, value: gpu, effect: NoSchedule, tolerationSeconds: 30}]}\n",
		"node: {affinity: {nodeAffinity: {requiredDuringSchedulingIgnoredDuringExecution: {nodeSelectorTerms: [{matchExpressions: [{key: k, operator: In, values: [a]}]}]}}}}\n",
		"node: {resources: {filevol: {limits: {memory: 512Mi, cpu: 1}}}}\n",
		"imagePullSecrets: [{name: regcred}]\n",
		"image: {filevol: {repository: localhost:5000/filevol, tag: dev, pullPolicy: Never}}\n",
		"fullnameOverride: fv\n",
	} {
		if err := renderErr(t, values); err != nil {
			t.Errorf("values %q: %v", values, err)
		}
	}
}
