{{/* Changed-block tracking (snapshotMetadata in values.yaml).

filevol.snapshotMetadataOn: (dict "root" $ "pool" "local"|"shared") -> "true"
when that driver runs the csi-snapshot-metadata sidecar: its snapshots are
on, snapshotMetadata.enabled is true (or auto and the API server serves
SnapshotMetadataService), and one process holds all its snapshots: the
shared-pool driver's controller, or the node-local driver's controller with
snapshots.snapshotter: controller. */}}
{{- define "filevol.snapshotMetadataOn" -}}
{{- $m := .root.Values.snapshotMetadata }}
{{- $wanted := false }}
{{- if eq (toString $m.enabled) "auto" }}
{{- $wanted = .root.Capabilities.APIVersions.Has "cbt.storage.k8s.io/v1beta1/SnapshotMetadataService" }}
{{- else }}
{{- $wanted = $m.enabled }}
{{- end }}
{{- if and $wanted (include "filevol.snapshotsOn" .) }}
{{- if eq .pool "shared" }}
{{- if .root.Values.sharedPool.enabled }}true{{ end }}
{{- else if and .root.Values.localPool.enabled .root.Values.controller.enabled (eq .root.Values.snapshots.snapshotter "controller") }}true
{{- end }}
{{- end }}
{{- end }}

{{/* filevol.snapshotMetadataName: (dict "root" $ "pool" ...) -> the name of
that driver's Service and the prefix of its objects. */}}
{{- define "filevol.snapshotMetadataName" -}}
{{- printf "%s-snapshot-metadata%s" (include "filevol.fullname" .root) (ternary "-shared" "" (eq .pool "shared")) }}
{{- end }}

{{/* filevol.snapshotMetadataTLSSecret: $ -> the Secret the sidecars serve
TLS with: the user's, or the one the chart makes. */}}
{{- define "filevol.snapshotMetadataTLSSecret" -}}
{{- .Values.snapshotMetadata.tlsSecretName | default (printf "%s-snapshot-metadata-tls" (include "filevol.fullname" .)) }}
{{- end }}

{{/* filevol.snapshotMetadataContainer: (dict "root" $ "ports" <the
controller's ports> "hostNetwork" <bool> "resources" <requests>) -> the
sidecar's container, talking to the filevol of the same pod on /csi. */}}
{{- define "filevol.snapshotMetadataContainer" -}}
- name: csi-snapshot-metadata
  image: {{ include "filevol.image" (dict "root" .root "key" "snapshotMetadata") }}
  imagePullPolicy: {{ .root.Values.image.snapshotMetadata.pullPolicy }}
  args:
    - --csi-address=/csi/csi.sock
    - --port={{ .ports.snapshotMetadata }}
    - --http-endpoint={{ include "filevol.bindAddress" .hostNetwork }}:{{ .ports.snapshotMetadataHealth }}
    - --tls-cert=/tls/tls.crt
    - --tls-key=/tls/tls.key
    - --v={{ .root.Values.logLevel }}
    - --timeout=60s
  {{- with include "filevol.apiServerEnv" .root | trim }}
  env:
    {{- . | nindent 4 }}
  {{- end }}
  {{- include "filevol.sidecarSecurityContext" .root | nindent 2 }}
  ports:
    - name: snapshot-meta
      containerPort: {{ .ports.snapshotMetadata }}
      protocol: TCP
  readinessProbe:
    httpGet:
      path: /health
      port: {{ .ports.snapshotMetadataHealth }}
      {{- if .hostNetwork }}
      host: 127.0.0.1
      {{- end }}
    periodSeconds: 10
  {{- with .resources }}
  resources:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  volumeMounts:
    - name: socket-dir
      mountPath: /csi
    - name: snapshot-metadata-tls
      mountPath: /tls
      readOnly: true
{{- end }}

{{/* filevol.snapshotMetadataVolume: $ -> the pod volume of the TLS Secret. */}}
{{- define "filevol.snapshotMetadataVolume" -}}
- name: snapshot-metadata-tls
  secret:
    secretName: {{ include "filevol.snapshotMetadataTLSSecret" . }}
    items:
      - {key: tls.crt, path: tls.crt}
      - {key: tls.key, path: tls.key}
{{- end }}
