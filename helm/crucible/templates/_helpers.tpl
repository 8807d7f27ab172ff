{{/* Names ------------------------------------------------------------------------- */}}

{{- define "crucible.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The prefix of every object name; room is left for the longest suffix (-control-plane). */}}
{{- define "crucible.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "crucible.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Labels: "crucible.labels" (dict "ctx" $ "component" "operator") ---------------- */}}

{{- define "crucible.selectorLabels" -}}
app.kubernetes.io/name: {{ include "crucible.name" .ctx }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "crucible.labels" -}}
{{ include "crucible.selectorLabels" . }}
helm.sh/chart: {{ include "crucible.chart" .ctx }}
app.kubernetes.io/version: {{ .ctx.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .ctx.Release.Service }}
app.kubernetes.io/part-of: crucible
{{- with .ctx.Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* Service accounts ------------------------------------------------------------ */}}

{{- define "crucible.serviceAccountName" -}}
{{- $sa := index .ctx.Values .component "serviceAccount" -}}
{{- if $sa.create -}}
{{- default (printf "%s-%s" (include "crucible.fullname" .ctx) .suffix) $sa.name -}}
{{- else -}}
{{- default "default" $sa.name -}}
{{- end -}}
{{- end -}}

{{- define "crucible.controlPlane.serviceAccountName" -}}
{{- include "crucible.serviceAccountName" (dict "ctx" . "component" "controlPlane" "suffix" "control-plane") -}}
{{- end -}}

{{- define "crucible.operator.serviceAccountName" -}}
{{- include "crucible.serviceAccountName" (dict "ctx" . "component" "operator" "suffix" "operator") -}}
{{- end -}}

{{- define "crucible.worker.serviceAccountName" -}}
{{- include "crucible.serviceAccountName" (dict "ctx" . "component" "worker" "suffix" "worker") -}}
{{- end -}}

{{/* Image ----------------------------------------------------------------------- */}}

{{- define "crucible.image" -}}
{{- $image := .Values.image -}}
{{- if $image.digest -}}
{{- printf "%s@%s" $image.repository $image.digest -}}
{{- else -}}
{{- printf "%s:%s" $image.repository (default .Chart.AppVersion $image.tag) -}}
{{- end -}}
{{- end -}}

{{/* Settings sources -------------------------------------------------------------- */}}

{{- define "crucible.secretName" -}}
{{- include "crucible.fullname" . -}}
{{- end -}}

{{- define "crucible.postgresql.host" -}}
{{- printf "%s-postgresql" (include "crucible.fullname" .) -}}
{{- end -}}

{{- define "crucible.redis.host" -}}
{{- printf "%s-redis" (include "crucible.fullname" .) -}}
{{- end -}}

{{/* Fails with one sentence naming the values to set when a required source is missing. */}}
{{- define "crucible.validate" -}}
{{- $v := .Values -}}
{{- if not (or $v.database.url $v.database.existingSecret $v.postgresql.enabled) -}}
{{- fail "no database: set database.existingSecret (a Secret with the Postgres URL, recommended), database.url, or postgresql.enabled=true for a trial install" -}}
{{- end -}}
{{- if not (or $v.broker.url $v.broker.existingSecret $v.redis.enabled) -}}
{{- fail "no broker: set broker.existingSecret (a Secret with the Redis URL, recommended), broker.url, or redis.enabled=true for a trial install" -}}
{{- end -}}
{{- if and $v.storage.claim $v.storage.uri -}}
{{- fail (printf "storage.claim (%q) and storage.uri (%q) are two kinds of storage: set one" $v.storage.claim $v.storage.uri) -}}
{{- end -}}
{{- if and $v.database.url (not (regexMatch "^postgresql(\\+psycopg)?://" $v.database.url)) -}}
{{- fail (printf "database.url must be a Postgres URL (postgresql+psycopg://user:password@host:5432/db), got a URL starting %q" (regexFind "^[^:]*:?" $v.database.url)) -}}
{{- end -}}
{{- if and $v.broker.url (not (regexMatch "^rediss?://" $v.broker.url)) -}}
{{- fail (printf "broker.url must be a Redis URL (redis://:password@host:6379/0), got a URL starting %q" (regexFind "^[^:]*:?" $v.broker.url)) -}}
{{- end -}}
{{- /* Against a cluster (not helm template), the Secrets named must exist: all missing ones in one message. */ -}}
{{- if lookup "v1" "Namespace" "" .Release.Namespace -}}
{{- $missing := list -}}
{{- range $what, $ref := dict "database.existingSecret" (and (not $v.database.url) $v.database.existingSecret) "broker.existingSecret" (and (not $v.broker.url) $v.broker.existingSecret) "adminToken.existingSecret" (and (not $v.adminToken.value) $v.adminToken.existingSecret) "operator.token.existingSecret" (and $v.operator.enabled $v.operator.token.existingSecret) -}}
{{- if and $ref (not (lookup "v1" "Secret" $.Release.Namespace $ref)) -}}
{{- $missing = append $missing (printf "%s (%q)" $what $ref) -}}
{{- end -}}
{{- end -}}
{{- if $missing -}}
{{- fail (printf "Secrets not found in namespace %q: %s; create them first (docs/deploy.md) or fix the names" .Release.Namespace (join ", " $missing)) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* A secretKeyRef: "crucible.secretRef" (dict "name" .. "key" ..) */}}
{{- define "crucible.secretRef" -}}
valueFrom:
  secretKeyRef:
    name: {{ .name }}
    key: {{ .key }}
{{- end -}}

{{- define "crucible.databaseUrlRef" -}}
{{- if or .Values.database.url (not .Values.database.existingSecret) -}}
{{- include "crucible.secretRef" (dict "name" (include "crucible.secretName" .) "key" "database-url") -}}
{{- else -}}
{{- include "crucible.secretRef" (dict "name" .Values.database.existingSecret "key" .Values.database.existingSecretKey) -}}
{{- end -}}
{{- end -}}

{{- define "crucible.brokerUrlRef" -}}
{{- if or .Values.broker.url (not .Values.broker.existingSecret) -}}
{{- include "crucible.secretRef" (dict "name" (include "crucible.secretName" .) "key" "broker-url") -}}
{{- else -}}
{{- include "crucible.secretRef" (dict "name" .Values.broker.existingSecret "key" .Values.broker.existingSecretKey) -}}
{{- end -}}
{{- end -}}

{{- define "crucible.adminTokenRef" -}}
{{- if or .Values.adminToken.value (not .Values.adminToken.existingSecret) -}}
{{- include "crucible.secretRef" (dict "name" (include "crucible.secretName" .) "key" "admin-token") -}}
{{- else -}}
{{- include "crucible.secretRef" (dict "name" .Values.adminToken.existingSecret "key" .Values.adminToken.existingSecretKey) -}}
{{- end -}}
{{- end -}}

{{- define "crucible.operatorTokenRef" -}}
{{- if .Values.operator.token.existingSecret -}}
{{- include "crucible.secretRef" (dict "name" .Values.operator.token.existingSecret "key" .Values.operator.token.existingSecretKey) -}}
{{- else -}}
{{- include "crucible.adminTokenRef" . -}}
{{- end -}}
{{- end -}}

{{- define "crucible.apiUrl" -}}
{{- default (printf "http://%s-control-plane.%s.svc:%d" (include "crucible.fullname" .) .Release.Namespace (int .Values.controlPlane.service.port)) .Values.operator.apiUrl -}}
{{- end -}}

{{/* Pod pieces shared by every Crucible container --------------------------------- */}}

{{- define "crucible.podSecurityContext" -}}
securityContext:
  {{- toYaml .Values.podSecurityContext | nindent 2 }}
{{- end -}}

{{- define "crucible.containerSecurityContext" -}}
securityContext:
  {{- toYaml .Values.containerSecurityContext | nindent 2 }}
{{- end -}}

{{/* The checksums roll the pods when settings or the chart's Secret change (hashed from
the values, not the rendered Secret, whose generated parts differ between renders). */}}
{{- define "crucible.configChecksum" -}}
checksum/config: {{ include (print .Template.BasePath "/config.yaml") . | sha256sum }}
checksum/secret: {{ pick .Values "database" "broker" "adminToken" "postgresql" "redis" | toJson | sha256sum }}
{{- end -}}

{{- define "crucible.envFromConfig" -}}
envFrom:
  - configMapRef:
      name: {{ include "crucible.fullname" . }}-config
{{- end -}}

{{/* The object storage keys, for the workers (recovery's checks, retention) and the API
(submit's check); the operator needs none, it only names the Secret in pods. */}}
{{- define "crucible.envFromConfigAndStorage" -}}
{{ include "crucible.envFromConfig" . }}
{{- if and .Values.storage.uri .Values.storage.secret }}
  - secretRef:
      name: {{ .Values.storage.secret }}
{{- end }}
{{- end -}}

{{- define "crucible.tmpVolumeMount" -}}
- name: tmp
  mountPath: /tmp
{{- end -}}

{{- define "crucible.tmpVolume" -}}
- name: tmp
  emptyDir:
    sizeLimit: 1Gi
{{- end -}}

{{/* The shared storage (storage.claim), at the path where workload pods have it, so that
the workers' checkpoint checks and the API read the same file:// URIs the pods wrote. */}}
{{- define "crucible.storageVolumeMount" -}}
{{- with .Values.storage.claim }}
- name: storage
  mountPath: {{ $.Values.storage.path }}
{{- end }}
{{- end -}}

{{- define "crucible.storageVolume" -}}
{{- with .Values.storage.claim }}
- name: storage
  persistentVolumeClaim:
    claimName: {{ . }}
{{- end }}
{{- end -}}

{{- define "crucible.imagePullSecrets" -}}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* nodeSelector, tolerations, affinity, spread and priority of one component's values. */}}
{{- define "crucible.scheduling" -}}
{{- with .nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .topologySpreadConstraints }}
topologySpreadConstraints:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- end -}}
