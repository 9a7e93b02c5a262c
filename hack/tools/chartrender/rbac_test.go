package chartrender

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
)

func clusterRole(t *testing.T, r *Result, name string) *rbacv1.ClusterRole {
	t.Helper()
	o := r.Find("ClusterRole", name)
	if o == nil {
		t.Fatalf("no ClusterRole %s", name)
	}
	return o.Typed.(*rbacv1.ClusterRole)
}

// ruleStrings renders rules as "group resources: verbs", one per rule.
func ruleStrings(rules []rbacv1.PolicyRule) []string {
	var s []string
	for _, r := range rules {
		s = append(s, strings.Join(r.APIGroups, ",")+" "+strings.Join(r.Resources, ",")+": "+strings.Join(r.Verbs, ","))
	}
	return s
}

// The exact grants of each role: adding a permission must change this test.
var wantRules = map[string][]string{
	"ClusterRole/fv-filevol-provisioner": {
		" persistentvolumes: get,list,watch,create,patch,delete",
		" persistentvolumeclaims: get,list,watch,update",
		"storage.k8s.io storageclasses: get,list,watch",
		" events: create,update,patch",
		"storage.k8s.io csinodes: get,list,watch",
		" nodes: get,list,watch",
		"storage.k8s.io volumeattributesclasses: get",
		"snapshot.storage.k8s.io volumesnapshots: get,list,watch,update",
		"snapshot.storage.k8s.io volumesnapshotcontents: get,list",
	},
	"Role/fv-filevol-provisioner": {
		"storage.k8s.io csistoragecapacities: get,list,watch,create,update,patch,delete",
		" pods: get",
	},
	"ClusterRole/fv-filevol-snapshotter": {
		" events: create,update,patch",
		"snapshot.storage.k8s.io volumesnapshotclasses: get,list,watch",
		"snapshot.storage.k8s.io volumesnapshotcontents: get,list,watch,update,patch",
		"snapshot.storage.k8s.io volumesnapshotcontents/status: update,patch",
		// Group snapshots are GA: csi-snapshotter v8.7.0 watches their
		// objects unless a feature gate turns them off, which the chart no
		// longer does.
		"groupsnapshot.storage.k8s.io volumegroupsnapshotclasses: get,list,watch",
		"groupsnapshot.storage.k8s.io volumegroupsnapshotcontents: get,list,watch,update,patch",
		"groupsnapshot.storage.k8s.io volumegroupsnapshotcontents/status: update,patch",
	},
	"ClusterRole/fv-filevol-resizer": {
		" persistentvolumes: get,list,watch,patch",
		" persistentvolumeclaims: get,list,watch",
		" persistentvolumeclaims/status: patch",
		" events: create,update,patch",
		// VolumeAttributesClass (GA): csi-resizer v2.3.0 watches them when the API is served.
		"storage.k8s.io volumeattributesclasses: get,list,watch",
	},
	"Role/fv-filevol-resizer": {
		"coordination.k8s.io leases: get,create,update",
	},
	"ClusterRole/fv-filevol-driver": {
		" events: create,patch",
		" persistentvolumes,nodes: get",
	},
}

func TestRBACRules(t *testing.T) {
	r := render(t, "")
	seen := map[string]bool{}
	for _, o := range r.Objects {
		var rules []rbacv1.PolicyRule
		switch v := o.Typed.(type) {
		case *rbacv1.ClusterRole:
			rules = v.Rules
		case *rbacv1.Role:
			rules = v.Rules
			if v.Namespace != testNamespace {
				t.Errorf("Role %s in namespace %q", v.Name, v.Namespace)
			}
		default:
			continue
		}
		key := o.Kind + "/" + o.Name
		seen[key] = true
		want, ok := wantRules[key]
		if !ok {
			t.Errorf("unexpected %s", key)
			continue
		}
		if got := ruleStrings(rules); !slices.Equal(got, want) {
			t.Errorf("%s rules:\n got  %q\n want %q", key, got, want)
		}
		for _, rule := range rules {
			bad := slices.Contains(rule.Verbs, "*") || slices.Contains(rule.Resources, "*") || slices.Contains(rule.APIGroups, "*") ||
				slices.Contains(rule.Resources, "secrets") || len(rule.NonResourceURLs) > 0
			for _, v := range []string{"escalate", "bind", "impersonate"} {
				bad = bad || slices.Contains(rule.Verbs, v)
			}
			if bad {
				t.Errorf("%s grants %v on %v", key, rule.Verbs, rule.Resources)
			}
		}
	}
	for key := range wantRules {
		if !seen[key] {
			t.Errorf("%s not rendered", key)
		}
	}
}

// TestRBACBindings: every binding ties an existing role to a rendered
// ServiceAccount in the release namespace, and every pod runs as one.
func TestRBACBindings(t *testing.T) {
	r := render(t, "")
	sas := map[string]bool{}
	for _, o := range r.Objects {
		if sa, ok := o.Typed.(*corev1.ServiceAccount); ok {
			sas[sa.Name] = true
		}
	}
	if len(sas) != 2 || !sas[nodeName] || !sas[ctrlName] {
		t.Fatalf("service accounts %v", sas)
	}
	bound := map[string][]string{} // role -> service accounts
	check := func(kind, name string, ref rbacv1.RoleRef, subjects []rbacv1.Subject) {
		if r.Find(ref.Kind, ref.Name) == nil {
			t.Errorf("%s %s refers to missing %s %s", kind, name, ref.Kind, ref.Name)
		}
		for _, s := range subjects {
			if s.Kind != "ServiceAccount" || s.Namespace != testNamespace || !sas[s.Name] {
				t.Errorf("%s %s binds %+v", kind, name, s)
			}
			bound[ref.Kind+"/"+ref.Name] = append(bound[ref.Kind+"/"+ref.Name], s.Name)
		}
	}
	for _, o := range r.Objects {
		switch b := o.Typed.(type) {
		case *rbacv1.ClusterRoleBinding:
			check(o.Kind, b.Name, b.RoleRef, b.Subjects)
		case *rbacv1.RoleBinding:
			check(o.Kind, b.Name, b.RoleRef, b.Subjects)
		}
	}
	want := map[string]string{
		"ClusterRole/fv-filevol-provisioner": nodeName,
		"Role/fv-filevol-provisioner":        nodeName,
		"ClusterRole/fv-filevol-snapshotter": nodeName,
		"ClusterRole/fv-filevol-resizer":     ctrlName,
		"Role/fv-filevol-resizer":            ctrlName,
	}
	for role, sa := range want {
		if !slices.Equal(bound[role], []string{sa}) {
			t.Errorf("%s bound to %v, want [%s]", role, bound[role], sa)
		}
	}
	// filevol runs in both pods and reports Events from both.
	if got := bound["ClusterRole/fv-filevol-driver"]; !slices.Equal(got, []string{nodeName, ctrlName}) {
		t.Errorf("driver role bound to %v", got)
	}
	if got := daemonSet(t, r).Spec.Template.Spec.ServiceAccountName; got != nodeName {
		t.Errorf("DaemonSet runs as %s", got)
	}
	if got := deployment(t, r).Spec.Template.Spec.ServiceAccountName; got != ctrlName {
		t.Errorf("Deployment runs as %s", got)
	}
}
