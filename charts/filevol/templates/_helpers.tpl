{{/* Names. Component objects are "<fullname>-<component>" (at most 63 characters). */}}
{{- define "filevol.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "filevol.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 50 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 50 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 50 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "filevol.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ include "filevol.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: filevol
{{- end }}

{{/* filevol.selectorLabels: (dict "root" $ "component" "node") */}}
{{- define "filevol.selectorLabels" -}}
app.kubernetes.io/name: {{ include "filevol.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{/* filevol.image: (dict "root" $ "key" "provisioner") -> repository:tag */}}
{{- define "filevol.image" -}}
{{- $img := index .root.Values.image .key }}
{{- $tag := $img.tag }}
{{- if and (not $tag) (has .key (list "filevol" "filevolCeph")) }}{{ $tag = printf "v%s" .root.Chart.AppVersion }}{{ end }}
{{- printf "%s:%s" $img.repository $tag }}
{{- end }}

{{/* The CSI socket directory on the node, and the socket as kubelet sees it. */}}
{{- define "filevol.socketDir" -}}
{{- printf "%s/plugins/%s" (trimSuffix "/" .Values.kubeletDir) .Values.driverName }}
{{- end }}
{{- define "filevol.socketPath" -}}
{{- printf "%s/csi.sock" (include "filevol.socketDir" .) }}
{{- end }}

{{/* Address the HTTP health endpoints bind: loopback when sharing the host's network. */}}
{{- define "filevol.bindAddress" -}}
{{- if . }}127.0.0.1{{ else }}0.0.0.0{{ end }}
{{- end }}

{{/* Environment that points client-go at apiServer.host instead of the kubernetes Service. */}}
{{- define "filevol.apiServerEnv" -}}
{{- with .Values.apiServer.host }}
- name: KUBERNETES_SERVICE_HOST
  value: {{ . | quote }}
- name: KUBERNETES_SERVICE_PORT
  value: {{ $.Values.apiServer.port | quote }}
{{- end }}
{{- end }}

{{/* Sidecars need neither privileges nor capabilities: they talk to the API and to the CSI socket. */}}
{{- define "filevol.sidecarSecurityContext" -}}
securityContext:
  allowPrivilegeEscalation: false
  readOnlyRootFilesystem: true
  capabilities:
    drop: ["ALL"]
  seccompProfile:
    type: RuntimeDefault
{{- end }}

{{/* Snapshots. snapshots.enabled and sharedPool.snapshots.enabled are true,
false or auto (the default). What needs the snapshot CRDs (a
VolumeSnapshotClass, a VolumeGroupSnapshotClass, csi-snapshotter and its
RBAC, the provisioner's rules to restore from a VolumeSnapshot) renders where
these helpers say "true", and only there. true: always (helm template
offline, GitOps). false: never. auto: when the API server serves the kind,
which helm install and upgrade read from its discovery (.Capabilities); so
a cluster without the CRDs installs without snapshots, and a helm upgrade
after the CRDs are installed adds them. helm template has no cluster to ask:
there auto renders none of it unless --api-versions names the kinds.

filevol.snapshotsOn: (dict "root" $ "pool" "local"|"shared") -> "true" when
that driver's snapshot objects render, else "". */}}
{{- define "filevol.snapshotsOn" -}}
{{- $s := ternary .root.Values.sharedPool.snapshots .root.Values.snapshots (eq .pool "shared") }}
{{- if eq (toString $s.enabled) "auto" }}
{{- if .root.Capabilities.APIVersions.Has "snapshot.storage.k8s.io/v1/VolumeSnapshotClass" }}true{{ end }}
{{- else if $s.enabled }}true{{ end }}
{{- end }}

{{/* filevol.groupSnapshotsOn: (dict "root" $ "pool" "local"|"shared") ->
"true" when volume snapshots are on and, with auto, the API server also
serves groupsnapshot.storage.k8s.io/v1 VolumeGroupSnapshotClass (a separate
set of CRDs: a cluster may have the one and not the other). Where it is ""
no VolumeGroupSnapshotClass renders; csi-snapshotter is started with no
group flag either way (v8.7.0 has group snapshots on by default and turns
them off itself, at start, when their CRDs are not served: see
filevol.podAnnotations). */}}
{{- define "filevol.groupSnapshotsOn" -}}
{{- if include "filevol.snapshotsOn" . }}
{{- $s := ternary .root.Values.sharedPool.snapshots .root.Values.snapshots (eq .pool "shared") }}
{{- if ne (toString $s.enabled) "auto" }}true
{{- else if .root.Capabilities.APIVersions.Has "groupsnapshot.storage.k8s.io/v1/VolumeGroupSnapshotClass" }}true{{ end }}
{{- end }}
{{- end }}

{{/* filevol.snapshotsLeftOut: (dict "root" $ "pool" "local"|"shared") -> what
auto left out because the API server does not serve it: "snapshots"
(everything of filevol.snapshotsOn), "groups" (group snapshots only), or "". */}}
{{- define "filevol.snapshotsLeftOut" -}}
{{- $s := ternary .root.Values.sharedPool.snapshots .root.Values.snapshots (eq .pool "shared") }}
{{- if eq (toString $s.enabled) "auto" }}
{{- if not (include "filevol.snapshotsOn" .) }}snapshots
{{- else if not (include "filevol.groupSnapshotsOn" .) }}groups{{ end }}
{{- end }}
{{- end }}

{{/* filevol.podAnnotations: (dict "root" $ "pool" "local"|"shared"
"annotations" <podAnnotations> "groups" <whether this pod's csi-snapshotter
serves groups>) -> the pod template's annotations (YAML, "" for none).
csi-snapshotter looks for the group snapshot CRDs once, at start: while auto
leaves group snapshots out, its pod carries an annotation saying so, and
the helm upgrade that turns them on removes it, which restarts the pod. */}}
{{- define "filevol.podAnnotations" -}}
{{- $a := deepCopy (.annotations | default dict) }}
{{- if and .groups (eq (include "filevol.snapshotsLeftOut" .) "groups") }}
{{- $_ := set $a "filevol.csi.io/group-snapshots" "off: groupsnapshot.storage.k8s.io/v1 not served at install (snapshots enabled: auto)" }}
{{- end }}
{{- with $a }}{{ toYaml . }}{{ end }}
{{- end }}

{{/* Refuse combinations that cannot work, with a message that says what to change. */}}
{{- define "filevol.validate" -}}
{{- if and .Values.apiServer.host (hasPrefix "127." .Values.apiServer.host) }}
{{- if not .Values.node.hostNetwork }}
{{- fail "apiServer.host is a loopback address: set node.hostNetwork=true so the node pods share the host's network" }}
{{- end }}
{{- if and .Values.localPool.enabled .Values.controller.enabled (not .Values.controller.hostNetwork) }}
{{- fail "apiServer.host is a loopback address: set controller.hostNetwork=true (or controller.enabled=false)" }}
{{- end }}
{{- if and .Values.sharedPool.enabled (not .Values.sharedPool.controller.hostNetwork) }}
{{- fail "apiServer.host is a loopback address: set sharedPool.controller.hostNetwork=true" }}
{{- end }}
{{- end }}
{{- $sp := .Values.sharedPool }}
{{- $local := .Values.localPool.enabled }}
{{- if not (or $local $sp.enabled) }}
{{- fail "localPool.enabled and sharedPool.enabled are both false: nothing to install" }}
{{- end }}
{{- if $sp.enabled }}
{{- if and $local (eq $sp.driverName .Values.driverName) }}
{{- fail (printf "sharedPool.driverName must differ from driverName (%s): they are two CSIDrivers" .Values.driverName) }}
{{- end }}
{{- if and $local (eq (trimSuffix "/" $sp.hostPath) (trimSuffix "/" .Values.pool.hostPath)) }}
{{- fail "sharedPool.hostPath must differ from pool.hostPath: one directory cannot be a node-local pool and a shared one" }}
{{- end }}
{{- end }}
{{- /* Checked whether or not auto finds the CRDs now: an install that works
only until they are installed would fail at the helm upgrade that turns
snapshots on. */}}
{{- if and $local (ne (toString .Values.snapshots.enabled) "false") (eq .Values.snapshots.snapshotter "controller") }}
{{- if not .Values.controller.enabled }}
{{- fail "snapshots.snapshotter=controller runs csi-snapshotter in the controller Deployment: set controller.enabled=true" }}
{{- end }}
{{- if not .Values.pool.shared }}
{{- fail "snapshots.snapshotter=controller needs pool.shared=true: the controller's filevol snapshots in the nodes' pool, which it opens only when every node it runs on has that pool (one node, or shared storage); with node-local pools on several nodes use snapshots.snapshotter=node (no group snapshots) or the shared-pool driver" }}
{{- end }}
{{- end }}
{{- if $sp.enabled }}
{{- if and $sp.dirPool.enabled (or (eq (trimSuffix "/" $sp.dirPool.hostPath) (trimSuffix "/" $sp.hostPath)) (and $local (eq (trimSuffix "/" $sp.dirPool.hostPath) (trimSuffix "/" .Values.pool.hostPath)))) }}
{{- fail "sharedPool.dirPool.hostPath must differ from sharedPool.hostPath and pool.hostPath: an image pool and a directory pool are two directories" }}
{{- end }}
{{- range $sp.storageClasses }}
{{- if and (eq (get (.parameters | default dict) "provisioningMode") "directory") (not $sp.dirPool.enabled) }}
{{- fail (printf "sharedPool.storageClasses %q is a directory class (provisioningMode: directory): set sharedPool.dirPool.enabled=true" .name) }}
{{- end }}
{{- end }}
{{- end }}
{{- if $local }}
{{- range .Values.storageClasses }}
{{- if eq (get (.parameters | default dict) "provisioningMode") "directory" }}
{{- fail (printf "storageClasses %q: directory volumes are served by the shared-pool driver (sharedPool.dirPool and sharedPool.storageClasses), ReadWriteMany; the node-local driver has no directory pool in this chart" .name) }}
{{- end }}
{{- end }}
{{- end }}
{{- /* Ports in use: distinct within a pod, and across pods sharing the host's network. */}}
{{- $np := list }}
{{- if $local }}
{{- $np = append $np (int .Values.node.ports.http) }}
{{- if eq .Values.registrar "sidecar" }}{{ $np = append $np (int .Values.node.ports.registrar) }}{{ end }}
{{- if eq .Values.livenessProbe "sidecar" }}{{ $np = append $np (int .Values.node.ports.livenessProbe) }}{{ end }}
{{- end }}
{{- if $sp.enabled }}
{{- $np = append $np (int $sp.node.ports.http) }}
{{- if eq .Values.registrar "sidecar" }}{{ $np = append $np (int $sp.node.ports.registrar) }}{{ end }}
{{- if eq .Values.livenessProbe "sidecar" }}{{ $np = append $np (int $sp.node.ports.livenessProbe) }}{{ end }}
{{- end }}
{{- $cp := list (int .Values.controller.ports.http) }}
{{- if eq .Values.livenessProbe "sidecar" }}{{ $cp = append $cp (int .Values.controller.ports.livenessProbe) }}{{ end }}
{{- $sc := list (int $sp.controller.ports.http) }}
{{- if eq .Values.livenessProbe "sidecar" }}{{ $sc = append $sc (int $sp.controller.ports.livenessProbe) }}{{ end }}
{{- if include "filevol.snapshotMetadataOn" (dict "root" . "pool" "local") }}{{ $cp = concat $cp (list (int .Values.controller.ports.snapshotMetadata) (int .Values.controller.ports.snapshotMetadataHealth)) }}{{ end }}
{{- if include "filevol.snapshotMetadataOn" (dict "root" . "pool" "shared") }}{{ $sc = concat $sc (list (int $sp.controller.ports.snapshotMetadata) (int $sp.controller.ports.snapshotMetadataHealth)) }}{{ end }}
{{- if ne (len $np) (len (uniq $np)) }}{{ fail (printf "node.ports and sharedPool.node.ports: the ports in use in the node pod must differ (%v)" $np) }}{{ end }}
{{- if ne (len $cp) (len (uniq $cp)) }}{{ fail (printf "controller.ports: the ports in use must differ (%v)" $cp) }}{{ end }}
{{- if ne (len $sc) (len (uniq $sc)) }}{{ fail (printf "sharedPool.controller.ports: the ports in use must differ (%v)" $sc) }}{{ end }}
{{- /* Pods on the host's network share its ports. */}}
{{- $host := list }}
{{- if .Values.node.hostNetwork }}{{ $host = concat $host $np }}{{ end }}
{{- if and $local .Values.controller.enabled .Values.controller.hostNetwork }}{{ $host = concat $host $cp }}{{ end }}
{{- if and $sp.enabled $sp.controller.hostNetwork }}{{ $host = concat $host $sc }}{{ end }}
{{- if ne (len $host) (len (uniq $host)) }}{{ fail (printf "the ports of the pods that use the host's network (node, controller, sharedPool.controller) must differ: %v" $host) }}{{ end }}
{{- $names := dict }}
{{- $classes := list }}
{{- if $local }}{{ $classes = concat $classes .Values.storageClasses }}{{ end }}
{{- if $sp.enabled }}{{ $classes = concat $classes $sp.storageClasses }}{{ end }}
{{- range $classes }}
{{- if hasKey $names .name }}{{ fail (printf "storageClasses: %q is listed twice" .name) }}{{ end }}
{{- $_ := set $names .name true }}
{{- end }}
{{- if and (eq (toString .Values.snapshotMetadata.enabled) "true") (not (include "filevol.snapshotMetadataOn" (dict "root" . "pool" "local"))) (not (include "filevol.snapshotMetadataOn" (dict "root" . "pool" "shared"))) }}
{{- fail "snapshotMetadata.enabled is true but no driver can serve it: it needs snapshots on and one process that holds them all, the shared-pool driver (sharedPool.enabled) or the node-local one with snapshots.snapshotter: controller (one node, or pool.shared)" }}
{{- end }}
{{- end }}

{{/* filevol.storageClasses: (dict "root" $ "classes" <list> "driver" <provisioner>), one StorageClass per entry. */}}
{{- define "filevol.storageClasses" -}}
{{- $root := .root }}
{{- $driver := .driver }}
{{- range .classes }}
---
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: {{ .name }}
  labels:
    {{- include "filevol.labels" $root | nindent 4 }}
    {{- with .labels }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  {{- if or .default .annotations }}
  annotations:
    {{- if .default }}
    storageclass.kubernetes.io/is-default-class: "true"
    {{- end }}
    {{- with .annotations }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  {{- end }}
provisioner: {{ $driver }}
parameters:
  {{- if eq (get (.parameters | default dict) "provisioningMode") "directory" }}
  {{- /* A directory of the pool's filesystem: no filesystem type to choose (filevol refuses one), always thin. */}}
  {{- else }}
  csi.storage.k8s.io/fstype: {{ .fsType | default "ext4" }}
  provisioning: {{ .provisioning | default "thin" }}
  {{- end }}
  {{- range $k, $v := .parameters }}
  {{ $k }}: {{ $v | quote }}
  {{- end }}
reclaimPolicy: {{ .reclaimPolicy | default "Delete" }}
allowVolumeExpansion: {{ if hasKey . "allowVolumeExpansion" }}{{ .allowVolumeExpansion }}{{ else }}true{{ end }}
volumeBindingMode: {{ .volumeBindingMode | default "WaitForFirstConsumer" }}
{{- with .mountOptions }}
mountOptions:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}
{{- end }}

{{/* The node filevol containers' view of the host's cgroups (cgroupHostPath):
where they look for pods' cgroups to enforce volume I/O limits. A cgroup v1
node throttles in blkio/, a v2 node at the root; filevol skips the one that
cannot. */}}
{{- define "filevol.cgroupArgs" -}}
{{- if .Values.cgroupHostPath }}
- --cgroup-roots=/host/cgroup/blkio,/host/cgroup
{{- else }}
- --cgroup-roots=
{{- end }}
{{- end }}
{{- define "filevol.cgroupMount" -}}
{{- if .Values.cgroupHostPath }}
- name: cgroup
  mountPath: /host/cgroup
{{- end }}
{{- end }}

{{/* filevol.publishSecretNamespace: the namespace of
sharedPool.controllerPublishSecret (the release's when unset). */}}
{{- define "filevol.publishSecretNamespace" -}}
{{- .Values.sharedPool.controllerPublishSecret.namespace | default .Release.Namespace -}}
{{- end }}
