{{/*
The shared-pool driver's containers in the node DaemonSet's pod. One more
filevol, node service only (--mode node --pool-shared): a filevol process
serves one image pool, and the shared pool is opened as shared (each process
repairs and collects only what it made), so it cannot be the node-local
filevol. It registers the shared driver with kubelet (itself, or through a
second node-driver-registrar) and needs no provisioner: the controller
Deployment creates and attaches the shared pool's volumes.
*/}}
{{- define "filevol.sharedSocketDir" -}}
{{- printf "%s/plugins/%s" (trimSuffix "/" .Values.kubeletDir) .Values.sharedPool.driverName }}
{{- end }}

{{- define "filevol.sharedNodeContainers" -}}
{{- $sp := .Values.sharedPool }}
{{- $kubelet := trimSuffix "/" .Values.kubeletDir }}
{{- $bind := include "filevol.bindAddress" .Values.node.hostNetwork }}
{{- $socket := printf "%s/csi.sock" (include "filevol.sharedSocketDir" .) }}
{{- $ports := $sp.node.ports }}
{{- $probePort := ternary $ports.http $ports.livenessProbe (eq .Values.livenessProbe "builtin") }}
- name: filevol-shared
  image: {{ include "filevol.image" (dict "root" . "key" "filevol") }}
  imagePullPolicy: {{ .Values.image.filevol.pullPolicy }}
  args:
    - --mode=node
    - --endpoint=unix://{{ $socket }}
    - --driver-name={{ $sp.driverName }}
    - --node-id=$(NODE_NAME)
    - --pool-dir={{ $sp.hostPath }}
    - --pool-shared
    - --pool-name={{ $sp.name }}
    {{- if $sp.requireTLS }}
    - --shared-pool-require=tls
    {{- end }}
    {{- if $sp.clientTLS.secretName }}
    - --shared-pool-tls-secret-dir=/etc/filevol/shared-pool-tls
    - --shared-pool-tls-dir={{ $sp.clientTLS.hostDir }}
    {{- end }}
    - --shared-pool-wait={{ $sp.mountWaitSeconds }}s
    {{- if $sp.dirPool.enabled }}
    - --dir-pool-dir={{ $sp.dirPool.hostPath }}
    {{- if not (kindIs "invalid" $sp.dirPool.requireTLS) }}
    - --dir-pool-require={{ ternary "tls" "none" $sp.dirPool.requireTLS }}
    {{- end }}
    {{- end }}
    - --max-volumes-per-node={{ .Values.maxVolumesPerNode }}
    - --kubelet-dir={{ $kubelet }}
    {{- include "filevol.cgroupArgs" . | nindent 4 }}
    {{- if eq .Values.registrar "builtin" }}
    - --registration-dir={{ $kubelet }}/plugins_registry
    {{- end }}
    - --http-endpoint={{ $bind }}:{{ $ports.http }}
    - --v={{ .Values.logLevel }}
  env:
    - name: NODE_NAME
      valueFrom:
        fieldRef:
          fieldPath: spec.nodeName
    {{- with include "filevol.apiServerEnv" . | trim }}
    {{- . | nindent 4 }}
    {{- end }}
  # Loop devices and mounts, as the node-local filevol.
  securityContext:
    privileged: true
  ports:
    - name: http-shared
      containerPort: {{ $ports.http }}
      protocol: TCP
  {{- include "filevol.sharedStartupProbe" (dict "port" $probePort "hostNetwork" .Values.node.hostNetwork "wait" $sp.mountWaitSeconds) | nindent 2 }}
  livenessProbe:
    httpGet:
      path: /healthz
      port: {{ $probePort }}
      {{- if .Values.node.hostNetwork }}
      host: 127.0.0.1
      {{- end }}
    initialDelaySeconds: 10
    periodSeconds: 10
    timeoutSeconds: 3
    failureThreshold: 5
  {{- with $sp.node.resources.filevol }}
  resources:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  volumeMounts:
    - name: kubelet-plugins
      mountPath: {{ $kubelet }}/plugins
      mountPropagation: Bidirectional
    - name: kubelet-pods
      mountPath: {{ $kubelet }}/pods
      mountPropagation: Bidirectional
    {{- if eq .Values.registrar "builtin" }}
    - name: registration-dir
      mountPath: {{ $kubelet }}/plugins_registry
    {{- end }}
    # sharedPool.mountPropagation: HostToContainer also shows a remount of
    # the shared filesystem made after the pod started.
    - name: shared-pool
      mountPath: {{ $sp.hostPath }}
      mountPropagation: {{ .Values.sharedPool.mountPropagation }}
    {{- if $sp.dirPool.enabled }}
    - name: shared-dir-pool
      mountPath: {{ $sp.dirPool.hostPath }}
      mountPropagation: {{ .Values.sharedPool.mountPropagation }}
    {{- end }}
    {{- if $sp.cephAdminSocketDir }}
    - name: ceph-admin-sockets
      mountPath: /run/ceph
      readOnly: true
    {{- end }}
    {{- if $sp.clientTLS.secretName }}
    - name: shared-pool-tls-secret
      mountPath: /etc/filevol/shared-pool-tls
      readOnly: true
    # Where the node's GlusterFS client reads them (clientTLS.hostDir).
    - name: shared-pool-tls
      mountPath: {{ $sp.clientTLS.hostDir }}
    {{- end }}
    - name: dev
      mountPath: /dev
    {{- include "filevol.cgroupMount" . | nindent 4 }}
{{- if eq .Values.registrar "sidecar" }}
- name: node-driver-registrar-shared
  image: {{ include "filevol.image" (dict "root" . "key" "nodeDriverRegistrar") }}
  imagePullPolicy: {{ .Values.image.nodeDriverRegistrar.pullPolicy }}
  args:
    - --csi-address=/csi/csi.sock
    - --kubelet-registration-path={{ $socket }}
    - --http-endpoint={{ $bind }}:{{ $ports.registrar }}
    - --v={{ .Values.logLevel }}
  {{- include "filevol.sidecarSecurityContext" . | nindent 2 }}
  ports:
    - name: registrar-sh
      containerPort: {{ $ports.registrar }}
      protocol: TCP
  livenessProbe:
    httpGet:
      path: /healthz
      port: registrar-sh
      {{- if .Values.node.hostNetwork }}
      host: 127.0.0.1
      {{- end }}
    initialDelaySeconds: 5
    periodSeconds: 10
    timeoutSeconds: 3
    failureThreshold: 5
  {{- with $sp.node.resources.nodeDriverRegistrar }}
  resources:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  volumeMounts:
    - name: shared-socket-dir
      mountPath: /csi
    - name: registration-dir
      mountPath: /registration
{{- end }}
{{- if eq .Values.livenessProbe "sidecar" }}
- name: liveness-probe-shared
  image: {{ include "filevol.image" (dict "root" . "key" "livenessProbe") }}
  imagePullPolicy: {{ .Values.image.livenessProbe.pullPolicy }}
  args:
    - --csi-address=/csi/csi.sock
    - --http-endpoint={{ $bind }}:{{ $ports.livenessProbe }}
    - --v={{ .Values.logLevel }}
  {{- include "filevol.sidecarSecurityContext" . | nindent 2 }}
  ports:
    - name: liveness-sh
      containerPort: {{ $ports.livenessProbe }}
      protocol: TCP
  {{- with $sp.node.resources.livenessProbe }}
  resources:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  volumeMounts:
    - name: shared-socket-dir
      mountPath: /csi
{{- end }}
{{- end }}

{{- define "filevol.sharedNodeVolumes" -}}
{{- if or (eq .Values.registrar "sidecar") (eq .Values.livenessProbe "sidecar") }}
# The shared driver's sidecars see only its socket directory.
- name: shared-socket-dir
  hostPath:
    path: {{ include "filevol.sharedSocketDir" . }}
    type: DirectoryOrCreate
{{- end }}
# Type Directory: the shared filesystem must be mounted there already; a node
# without it gets no pod instead of an empty pool of the same name.
- name: shared-pool
  hostPath:
    path: {{ .Values.sharedPool.hostPath }}
    type: Directory
{{- if .Values.sharedPool.dirPool.enabled }}
# The directory pool: a shared filesystem's mount point, as shared-pool.
- name: shared-dir-pool
  hostPath:
    path: {{ .Values.sharedPool.dirPool.hostPath }}
    type: Directory
{{- end }}
{{- include "filevol.cephAdminSocketVolume" . }}
{{- with .Values.sharedPool.clientTLS }}
{{- if .secretName }}
# The GlusterFS client's TLS files (sharedPool.clientTLS): the Secret, and
# the host directory the node's client reads them from.
- name: shared-pool-tls-secret
  secret:
    secretName: {{ .secretName }}
    defaultMode: 0400
- name: shared-pool-tls
  hostPath:
    path: {{ .hostDir }}
    type: DirectoryOrCreate
{{- end }}
{{- end }}
{{- end }}

{{/* filevol.sharedStartupProbe: the shared driver's filevol may wait
sharedPool.mountWaitSeconds at start for its pool's mount
(--shared-pool-wait); the liveness probe counts only after this one has
passed. Keys: port, hostNetwork, wait. */}}
{{- define "filevol.sharedStartupProbe" -}}
startupProbe:
  httpGet:
    path: /healthz
    port: {{ .port }}
    {{- if .hostNetwork }}
    host: 127.0.0.1
    {{- end }}
  periodSeconds: 5
  timeoutSeconds: 3
  failureThreshold: {{ add 12 (div (int .wait) 5) }}
{{- end }}

{{/* filevol.cephAdminSocketVolume: the ceph-fuse clients' admin sockets
(sharedPool.cephAdminSocketDir), read-only, where filevol reads whether the
client runs with the page cache off. */}}
{{- define "filevol.cephAdminSocketVolume" -}}
{{- with .Values.sharedPool.cephAdminSocketDir }}
- name: ceph-admin-sockets
  hostPath:
    path: {{ . }}
    type: Directory
{{- end }}
{{- end }}
