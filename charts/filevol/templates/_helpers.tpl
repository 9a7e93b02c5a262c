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
{{- if and (not $tag) (eq .key "filevol") }}{{ $tag = printf "v%s" .root.Chart.AppVersion }}{{ end }}
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

{{/* Refuse combinations that cannot work, with a message that says what to change. */}}
{{- define "filevol.validate" -}}
{{- if and .Values.apiServer.host (hasPrefix "127." .Values.apiServer.host) }}
{{- if not .Values.node.hostNetwork }}
{{- fail "apiServer.host is a loopback address: set node.hostNetwork=true so the node pods share the host's network" }}
{{- end }}
{{- if and .Values.controller.enabled (not .Values.controller.hostNetwork) }}
{{- fail "apiServer.host is a loopback address: set controller.hostNetwork=true (or controller.enabled=false)" }}
{{- end }}
{{- end }}
{{- /* Ports in use: distinct within a pod, and across pods sharing the host's network. */}}
{{- $np := list (int .Values.node.ports.http) }}
{{- if eq .Values.registrar "sidecar" }}{{ $np = append $np (int .Values.node.ports.registrar) }}{{ end }}
{{- if eq .Values.livenessProbe "sidecar" }}{{ $np = append $np (int .Values.node.ports.livenessProbe) }}{{ end }}
{{- $cp := list (int .Values.controller.ports.http) }}
{{- if eq .Values.livenessProbe "sidecar" }}{{ $cp = append $cp (int .Values.controller.ports.livenessProbe) }}{{ end }}
{{- if ne (len $np) (len (uniq $np)) }}{{ fail (printf "node.ports: the ports in use must differ (%v)" $np) }}{{ end }}
{{- if ne (len $cp) (len (uniq $cp)) }}{{ fail (printf "controller.ports: the ports in use must differ (%v)" $cp) }}{{ end }}
{{- if and .Values.controller.enabled .Values.node.hostNetwork .Values.controller.hostNetwork }}
{{- $all := concat $np $cp }}
{{- if ne (len $all) (len (uniq $all)) }}{{ fail "node.ports and controller.ports must differ when both pods use the host's network" }}{{ end }}
{{- end }}
{{- $names := dict }}
{{- range .Values.storageClasses }}
{{- if hasKey $names .name }}{{ fail (printf "storageClasses: %q is listed twice" .name) }}{{ end }}
{{- $_ := set $names .name true }}
{{- end }}
{{- end }}
