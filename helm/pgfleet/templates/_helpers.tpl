{{/*
Named templates of the pgfleet chart. Every template takes a chart scope: the chart's own root
context, or, from an app chart that has pgfleet as a dependency, `.Subcharts.pgfleet`.
*/}}

{{/* The chart name, or nameOverride. */}}
{{- define "pgfleet.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* "<release>-<chart>" (or fullnameOverride), at most 63 characters: the prefix of every name. */}}
{{- define "pgfleet.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* A name with a suffix, cut so the whole stays within 63 characters. */}}
{{- define "pgfleet.suffixed" -}}
{{- $full := include "pgfleet.fullname" .ctx }}
{{- printf "%s-%s" ($full | trunc (int (sub 62 (len .suffix))) | trimSuffix "-") .suffix }}
{{- end }}

{{/* helm.sh/chart label value. */}}
{{- define "pgfleet.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels of every resource. */}}
{{- define "pgfleet.labels" -}}
helm.sh/chart: {{ include "pgfleet.chart" . }}
{{ include "pgfleet.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: pgfleet
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* Stable labels, for selectors. */}}
{{- define "pgfleet.selectorLabels" -}}
app.kubernetes.io/name: {{ include "pgfleet.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/*
Labels of every pod that runs the pooler, in either mode: the peering Service selects
pgfleet.io/fleet, the PodMonitor selects pgfleet.io/metrics.
*/}}
{{- define "pgfleet.fleetLabels" -}}
pgfleet.io/fleet: {{ include "pgfleet.fullname" . }}
pgfleet.io/metrics: {{ include "pgfleet.fullname" . }}
{{- end }}

{{/* The image reference: repository:tag, or repository@digest. */}}
{{- define "pgfleet.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{- define "pgfleet.configMapName" -}}
{{- include "pgfleet.suffixed" (dict "ctx" . "suffix" "config") }}
{{- end }}

{{- define "pgfleet.secretName" -}}
{{- if .Values.secret.existingSecret }}
{{- .Values.secret.existingSecret }}
{{- else }}
{{- include "pgfleet.suffixed" (dict "ctx" . "suffix" "secret") }}
{{- end }}
{{- end }}

{{- define "pgfleet.peeringServiceName" -}}
{{- include "pgfleet.suffixed" (dict "ctx" . "suffix" "peers") }}
{{- end }}

{{- define "pgfleet.controllerName" -}}
{{- include "pgfleet.suffixed" (dict "ctx" . "suffix" "controller") }}
{{- end }}

{{- define "pgfleet.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "pgfleet.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "pgfleet.controllerServiceAccountName" -}}
{{- if .Values.controller.serviceAccount.create }}
{{- default (include "pgfleet.controllerName" .) .Values.controller.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.controller.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* Where pgfleet.yaml and the Secret's files appear in the container. */}}
{{- define "pgfleet.configDir" -}}/etc/pgfleet{{- end }}
{{- define "pgfleet.runtimeDir" -}}/run/pgfleet{{- end }}

{{/*
The peering token: the value, else the one already in the cluster (upgrades keep it), else a new
random one. It is remembered for the rest of this render so the Secret and its checksum agree.
*/}}
{{- define "pgfleet.peeringToken" -}}
{{- if not .Values.secret.peeringToken }}
{{- $token := "" }}
{{- $existing := lookup "v1" "Secret" .Release.Namespace (include "pgfleet.secretName" .) }}
{{- if and $existing $existing.data }}
{{- $token = index $existing.data "peering-token" | default "" | b64dec }}
{{- end }}
{{- $_ := set .Values.secret "peeringToken" (default (randAlphaNum 48) $token) }}
{{- end }}
{{- .Values.secret.peeringToken }}
{{- end }}

{{/* userlist.txt from secret.userlist in PgBouncer's format ("" escapes "), sorted by user. */}}
{{- define "pgfleet.userlist" -}}
{{- range $user, $secret := .Values.secret.userlist }}
{{- printf "\"%s\" \"%s\"\n" (replace "\"" "\"\"" $user) (replace "\"" "\"\"" (toString $secret)) }}
{{- end }}
{{- end }}

{{/*
pgfleet.yaml: config from values, plus what depends on the pod and the release (listen address by
mode, metrics on all interfaces, auth file, peering, controller), then extraConfig on top.
*/}}
{{- define "pgfleet.configData" -}}
{{- $v := .Values }}
{{- $c := deepCopy $v.config }}
{{- if include "pgfleet.iniEnabled" . }}
{{- /* The ini holds the pool's settings; only what depends on the pod is laid over it. */}}
{{- $c = dict "pgbouncer_ini" "pgbouncer.ini" "workers" $v.config.workers "listen" (deepCopy $v.config.listen) "auth" dict }}
{{- $_ := unset $c.listen "backlog" }}
{{- if not $c.listen.unix_socket_dir }}
{{- $_ := set $c.listen "unix_socket_dir" "" }}
{{- end }}
{{- end }}
{{- $listen := $c.listen }}
{{- if not $listen.address }}
{{- $_ := set $listen "address" (ternary "127.0.0.1" "0.0.0.0" (eq $v.mode "sidecar")) }}
{{- end }}
{{- if and (not $listen.unix_socket_dir) (not (include "pgfleet.iniEnabled" .)) }}
{{- $_ := unset $listen "unix_socket_dir" }}
{{- end }}
{{- $auth := $c.auth }}
{{- range $k := list "query" "user" "dbname" }}
{{- if not (index $auth $k) }}
{{- $_ := unset $auth $k }}
{{- end }}
{{- end }}
{{- $_ := set $auth "file" (printf "%s/userlist.txt" (include "pgfleet.configDir" .)) }}
{{- $_ := set $c "metrics" (dict "listen" (printf "0.0.0.0:%d" (int $v.metrics.port))) }}
{{- $domain := $v.clusterDomain }}
{{- if $v.peering.enabled }}
{{- $_ := set $c "peering" (dict
  "listen" (printf "0.0.0.0:%d" (int $v.peering.port))
  "advertise_address_env" "POD_IP"
  "discovery_dns" (printf "%s.%s.svc.%s" (include "pgfleet.peeringServiceName" .) .Release.Namespace $domain)
  "token_file" (printf "%s/peering-token" (include "pgfleet.configDir" .))
  "runtime_dir" (include "pgfleet.runtimeDir" .)) }}
{{- else }}
{{- $_ := set $c "peering" (dict "runtime_dir" (include "pgfleet.runtimeDir" .)) }}
{{- end }}
{{- if $v.controller.enabled }}
{{- $_ := set $c "controller" (dict
  "address" (printf "%s.%s.svc.%s:%d" (include "pgfleet.controllerName" .) .Release.Namespace $domain (int $v.controller.port))
  "listen" (printf "0.0.0.0:%d" (int $v.controller.port))
  "lost_room_hold" $v.controller.monitor.lostRoomHold) }}
{{- if $v.controller.monitor.conninfo }}
{{- $_ := set $c.controller "monitor" $v.controller.monitor.conninfo }}
{{- $_ := set $c.controller "terminate_lost_backends" $v.controller.monitor.terminateLostBackends }}
{{- end }}
{{- else }}
{{- $_ := set $c "controller" dict }}
{{- end }}
{{- $c = mergeOverwrite $c (deepCopy $v.extraConfig) }}
{{- printf "# pgfleet.yaml, rendered by the %s chart for release %s.\n" (include "pgfleet.chart" .) .Release.Name }}
{{- toYaml $c }}
{{- end }}

{{/* "true" when the pooler runs from a pgbouncer.ini (pgbouncerIni), else empty. */}}
{{- define "pgfleet.iniEnabled" -}}
{{- if or .Values.pgbouncerIni.content .Values.pgbouncerIni.existingConfigMap }}true{{ end }}
{{- end }}

{{/* Checksums that roll the pods when pgfleet.yaml, the chart's pgbouncer.ini or the chart's
Secret change. */}}
{{- define "pgfleet.checksumAnnotations" -}}
checksum/config: {{ printf "%s\n%s" (include "pgfleet.configData" .) .Values.pgbouncerIni.content | sha256sum }}
{{- if not .Values.secret.existingSecret }}
checksum/secret: {{ printf "%s\n%s" (include "pgfleet.userlist" .) (include "pgfleet.peeringToken" .) | sha256sum }}
{{- end }}
{{- end }}

{{/* terminationGracePeriodSeconds of the pooler: preStop sleep + drain timeout + margin. */}}
{{- define "pgfleet.gracePeriod" -}}
{{- $s := .Values.shutdown }}
{{- if kindIs "invalid" $s.terminationGracePeriodSeconds }}
{{- $pre := ternary 0 (int $s.preStopSleepSeconds) (eq $s.preStopAction "none") }}
{{- add $pre (int $s.drainTimeoutSeconds) (int $s.marginSeconds) }}
{{- else }}
{{- int $s.terminationGracePeriodSeconds }}
{{- end }}
{{- end }}

{{/*
The pgfleet container, shared by the standalone Deployment and the sidecar. Rendered as a
list item; `sidecar: true` makes it a native sidecar (restartPolicy: Always, no preStop).
Takes (dict "ctx" <chart scope> "sidecar" <bool>).
*/}}
{{- define "pgfleet.container" -}}
{{- $ := .ctx }}
{{- $v := $.Values -}}
- name: {{ ternary $v.sidecar.containerName "pgfleet" .sidecar }}
  image: {{ include "pgfleet.image" $ | quote }}
  imagePullPolicy: {{ $v.image.pullPolicy }}
  {{- if .sidecar }}
  restartPolicy: Always
  {{- end }}
  args:
    - --config
    - {{ include "pgfleet.configDir" $ }}/pgfleet.yaml
  env:
    - name: POD_NAME
      valueFrom:
        fieldRef:
          fieldPath: metadata.name
    - name: POD_NAMESPACE
      valueFrom:
        fieldRef:
          fieldPath: metadata.namespace
    - name: POD_IP
      valueFrom:
        fieldRef:
          fieldPath: status.podIP
    - name: TMPDIR
      value: {{ include "pgfleet.runtimeDir" $ }}
    {{- with $v.extraEnv }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  ports:
    - name: pgfleet-pg
      containerPort: {{ int $v.config.listen.port }}
      protocol: TCP
    - name: pgfleet-metrics
      containerPort: {{ int $v.metrics.port }}
      protocol: TCP
    {{- if $v.peering.enabled }}
    - name: pgfleet-peer
      containerPort: {{ int $v.peering.port }}
      protocol: TCP
    {{- end }}
  {{- with $v.probes.startup }}
  {{- if .enabled }}
  startupProbe:
    httpGet:
      path: {{ .path }}
      port: pgfleet-metrics
    periodSeconds: {{ int .periodSeconds }}
    failureThreshold: {{ int .failureThreshold }}
    timeoutSeconds: {{ int .timeoutSeconds }}
  {{- end }}
  {{- end }}
  {{- with $v.probes.readiness }}
  {{- if .enabled }}
  readinessProbe:
    httpGet:
      path: {{ .path }}
      port: pgfleet-metrics
    periodSeconds: {{ int .periodSeconds }}
    failureThreshold: {{ int .failureThreshold }}
    timeoutSeconds: {{ int .timeoutSeconds }}
  {{- end }}
  {{- end }}
  {{- with $v.probes.liveness }}
  {{- if .enabled }}
  livenessProbe:
    httpGet:
      path: {{ .path }}
      port: pgfleet-metrics
    periodSeconds: {{ int .periodSeconds }}
    failureThreshold: {{ int .failureThreshold }}
    timeoutSeconds: {{ int .timeoutSeconds }}
  {{- end }}
  {{- end }}
  {{- if and (not .sidecar) (ne $v.shutdown.preStopAction "none") }}
  lifecycle:
    preStop:
      {{- /* The sleep action is on by default from 1.30; on 1.29 fall back to exec. */}}
      {{- if and (eq $v.shutdown.preStopAction "sleep") (semverCompare ">=1.30.0-0" $.Capabilities.KubeVersion.Version) }}
      sleep:
        seconds: {{ int $v.shutdown.preStopSleepSeconds }}
      {{- else }}
      exec:
        command: ["sleep", "{{ int $v.shutdown.preStopSleepSeconds }}"]
      {{- end }}
  {{- end }}
  {{- with $v.resources }}
  resources:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $v.containerSecurityContext }}
  securityContext:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  volumeMounts:
    - name: {{ ternary $v.sidecar.volumeName "config" .sidecar }}
      mountPath: {{ include "pgfleet.configDir" $ }}
      readOnly: true
    - name: {{ ternary $v.sidecar.runtimeVolumeName "run" .sidecar }}
      mountPath: {{ include "pgfleet.runtimeDir" $ }}
{{- end }}

{{/*
The pooler's volumes: pgfleet.yaml and the Secret's files projected into one directory, and an
in-memory runtime directory (sockets; the root filesystem is read-only). Takes (dict "ctx" <chart
scope> "sidecar" <bool> "controller" <bool>); the controller gets no userlist. Sidecar files are world-readable inside the pod (mode 0444), since the
app pod's fsGroup is unknown; the standalone pod's are 0440 to the pod's fsGroup.
*/}}
{{- define "pgfleet.volumes" -}}
{{- $ := .ctx }}
{{- $v := $.Values -}}
- name: {{ ternary $v.sidecar.volumeName "config" .sidecar }}
  projected:
    defaultMode: {{ ternary 292 288 .sidecar }}
    sources:
      - configMap:
          name: {{ include "pgfleet.configMapName" $ }}
          items:
            - key: pgfleet.yaml
              path: pgfleet.yaml
            {{- if $v.pgbouncerIni.content }}
            - key: pgbouncer.ini
              path: pgbouncer.ini
            {{- end }}
      {{- if and $v.pgbouncerIni.existingConfigMap (not $v.pgbouncerIni.content) }}
      - configMap:
          name: {{ $v.pgbouncerIni.existingConfigMap }}
          items:
            - key: {{ $v.pgbouncerIni.key }}
              path: pgbouncer.ini
      {{- end }}
      - secret:
          name: {{ include "pgfleet.secretName" $ }}
          items:
            {{- if not .controller }}
            - key: userlist.txt
              path: userlist.txt
            {{- end }}
            {{- if $v.peering.enabled }}
            - key: peering-token
              path: peering-token
            {{- end }}
- name: {{ ternary $v.sidecar.runtimeVolumeName "run" .sidecar }}
  emptyDir:
    medium: Memory
    sizeLimit: 16Mi
{{- end }}

{{/* ---- The sidecar API: what an app's pod template includes (see values.yaml "sidecar"). ---- */}}

{{/* The native sidecar container, as one list item for initContainers. */}}
{{- define "pgfleet.sidecarContainer" -}}
{{- include "pgfleet.container" (dict "ctx" . "sidecar" true) }}
{{- end }}

{{/* The sidecar's volumes, as list items for the pod's volumes. */}}
{{- define "pgfleet.sidecarVolumes" -}}
{{- include "pgfleet.volumes" (dict "ctx" . "sidecar" true) }}
{{- end }}

{{/* Labels that make an app pod a member of the fleet (peering Service, PodMonitor). */}}
{{- define "pgfleet.sidecarPodLabels" -}}
{{- include "pgfleet.fleetLabels" . }}
{{- end }}

{{/* Annotations that roll app pods when pgfleet.yaml or the chart's Secret change. */}}
{{- define "pgfleet.sidecarPodAnnotations" -}}
{{- include "pgfleet.checksumAnnotations" . }}
{{- end }}
