{{/* Names and labels shared by every template. */}}
{{- define "rag-monitor.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "rag-monitor.fullname" -}}
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

{{- define "rag-monitor.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: rag-monitor
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end }}

{{/* The agent pods' selector labels. */}}
{{- define "rag-monitor.selectorLabels" -}}
app.kubernetes.io/name: {{ include "rag-monitor.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: agent
{{- end }}

{{- define "rag-monitor.gatewaySelectorLabels" -}}
app.kubernetes.io/name: {{ include "rag-monitor.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: gateway
{{- end }}

{{- define "rag-monitor.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "rag-monitor.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "rag-monitor.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/* Phoenix base URL the agent forwards to: the subchart's Service, the external URL, or "". */}}
{{- define "rag-monitor.phoenixUrl" -}}
{{- if .Values.phoenix.enabled }}
{{- printf "http://%s-phoenix:6006" .Release.Name }}
{{- else }}
{{- .Values.phoenix.externalUrl }}
{{- end }}
{{- end }}

{{/* Replicas in this mode; sqlite is always one. */}}
{{- define "rag-monitor.scaledOut" -}}
{{- if and (eq .Values.mode "postgresql") (or .Values.autoscaling.enabled (gt (int .Values.replicaCount) 1)) }}true{{ end }}
{{- end }}

{{/* Cross-field rules the schema cannot phrase clearly: fail with a message that says what to change. */}}
{{- define "rag-monitor.validate" -}}
{{- if eq .Values.mode "sqlite" }}
{{- if gt (int .Values.replicaCount) 1 }}
{{- fail (printf "mode=sqlite runs exactly one replica (SQLite has one writer); got replicaCount=%d. Use mode=postgresql to scale out." (int .Values.replicaCount)) }}
{{- end }}
{{- if .Values.autoscaling.enabled }}
{{- fail "mode=sqlite cannot autoscale (SQLite has one writer): set autoscaling.enabled=false or mode=postgresql" }}
{{- end }}
{{- if .Values.gateway.enabled }}
{{- fail "gateway.enabled routes traces across agent replicas: it needs mode=postgresql" }}
{{- end }}
{{- end }}
{{- if eq .Values.mode "postgresql" }}
{{- if not .Values.store.postgresql.existingSecret }}
{{- fail "mode=postgresql needs store.postgresql.existingSecret: the name of a Secret holding the database URL (key store.postgresql.secretKey)" }}
{{- end }}
{{- if not .Values.secrets.pseudonymKey.existingSecret }}
{{- fail "mode=postgresql needs secrets.pseudonymKey.existingSecret: replicas sharing a store (and pods restarted with an emptyDir) must use one pseudonym key, from a Secret (key secrets.pseudonymKey.secretKey)" }}
{{- end }}
{{- end }}
{{- if and .Values.phoenix.enabled .Values.phoenix.externalUrl }}
{{- fail "set either phoenix.enabled (deploy the Phoenix subchart) or phoenix.externalUrl, not both" }}
{{- end }}
{{- end }}

{{/* The Prometheus rule files (rag_monitor/defaults/alerts/rules/, copied under files/), file name -> parsed
     document; a file without a top-level `groups` list (e.g. a promtool test) is skipped. */}}
{{- define "rag-monitor.ruleFiles" -}}
{{- $files := dict }}
{{- range $path, $_ := .Files.Glob "files/alerts/rules/*.{yml,yaml}" }}
{{- $doc := fromYaml ($.Files.Get $path) }}
{{- if and (hasKey $doc "groups") (not (hasKey $doc "tests")) }}
{{- $_ := set $files (base $path) $doc }}
{{- end }}
{{- end }}
{{- toJson $files }}
{{- end }}

{{/* The Secret holding the OTLP token: the operator's, else the generated one; empty: none. */}}
{{- define "rag-monitor.otlpTokenSecret" -}}
{{- if .Values.secrets.otlpToken.existingSecret -}}
{{ .Values.secrets.otlpToken.existingSecret }}
{{- else if .Values.secrets.otlpToken.generate -}}
{{ include "rag-monitor.fullname" . }}-otlp-token
{{- end -}}
{{- end }}
