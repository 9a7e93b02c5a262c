package chartrender

import (
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	storagev1 "k8s.io/api/storage/v1"
)

// TestSharedControllerPublishSecret: sharedPool.controllerPublishSecret is
// named by every shared class that names none of its own, and csi-attacher
// may get that one Secret, in its namespace, and nothing else of it.
func TestSharedControllerPublishSecret(t *testing.T) {
	const (
		nameKey = "csi.storage.k8s.io/controller-publish-secret-name"
		nsKey   = "csi.storage.k8s.io/controller-publish-secret-namespace"
	)
	r := render(t, `sharedPool:
  enabled: true
  controllerPublishSecret: {name: ceph-fence, namespace: ceph-creds}
  storageClasses:
    - name: filevol-ceph
    - name: own
      parameters: {csi.storage.k8s.io/controller-publish-secret-name: other, csi.storage.k8s.io/controller-publish-secret-namespace: elsewhere}
`)
	for class, want := range map[string][2]string{"filevol-ceph": {"ceph-fence", "ceph-creds"}, "own": {"other", "elsewhere"}} {
		sc := r.Find("StorageClass", class)
		if sc == nil {
			t.Fatalf("no StorageClass %s", class)
		}
		p := sc.Typed.(*storagev1.StorageClass).Parameters
		if p[nameKey] != want[0] || p[nsKey] != want[1] {
			t.Errorf("class %s names Secret %s/%s, want %s/%s", class, p[nsKey], p[nameKey], want[1], want[0])
		}
	}
	role := r.Find("Role", sharedName+"-publish-secret")
	if role == nil || role.Namespace != "ceph-creds" {
		t.Fatalf("the attacher's Role for the Secret: %+v, want one in ceph-creds", role)
	}
	rules := role.Typed.(*rbacv1.Role).Rules
	if len(rules) != 1 || len(rules[0].Resources) != 1 || rules[0].Resources[0] != "secrets" ||
		len(rules[0].ResourceNames) != 1 || rules[0].ResourceNames[0] != "ceph-fence" || len(rules[0].Verbs) != 1 || rules[0].Verbs[0] != "get" {
		t.Errorf("the Role's rules %+v, want get of secrets/ceph-fence alone", rules)
	}
	rb := r.Find("RoleBinding", sharedName+"-publish-secret")
	if rb == nil || rb.Namespace != "ceph-creds" {
		t.Fatalf("RoleBinding %+v", rb)
	}
	b := rb.Typed.(*rbacv1.RoleBinding)
	if len(b.Subjects) != 1 || b.Subjects[0].Name != sharedName || b.Subjects[0].Namespace != testNamespace || b.RoleRef.Name != role.Name {
		t.Errorf("RoleBinding %+v binds not the shared controller's ServiceAccount to the Role", b)
	}

	// The release's namespace by default; nothing without a name.
	r = render(t, "sharedPool: {enabled: true, controllerPublishSecret: {name: ceph-fence}}\n")
	if p := r.Find("StorageClass", "filevol-shared").Typed.(*storagev1.StorageClass).Parameters; p[nsKey] != testNamespace {
		t.Errorf("the Secret's namespace %q, want the release's %q", p[nsKey], testNamespace)
	}
	r = render(t, sharedOn)
	if p := r.Find("StorageClass", "filevol-shared").Typed.(*storagev1.StorageClass).Parameters; p[nameKey] != "" || r.Find("Role", sharedName+"-publish-secret") != nil {
		t.Errorf("without controllerPublishSecret: class parameters %v, or a Role for a Secret", p)
	}
	if err := renderErr(t, "sharedPool: {enabled: true, controllerPublishSecret: {name: Bad_Name}}\n"); err == nil {
		t.Error("a Secret name that is no DNS subdomain was accepted")
	}
}
