{{/* The base of every object name: the release name, with "guardedjob" added
unless it is already in it (release "guardedjob" gives guardedjob-manager, as the
kustomize install names it). */}}
{{- define "guardedjob.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- else if contains "guardedjob" .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-guardedjob" .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "guardedjob.manager" -}}
{{ include "guardedjob.fullname" . }}-manager
{{- end -}}

{{- define "guardedjob.labels" -}}
app.kubernetes.io/name: guardedjob
app.kubernetes.io/instance: {{ .Release.Name }}
{{ include "guardedjob.versionLabels" . }}
{{- end -}}

{{/* The labels of guardedjob.labels that no selector has: a Pod template takes them
beside its selector's labels, each key once. */}}
{{- define "guardedjob.versionLabels" -}}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* Selects the manager's Pods: never change on upgrade (a Deployment's selector is
immutable). */}}
{{- define "guardedjob.selectorLabels" -}}
app.kubernetes.io/name: guardedjob
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: manager
{{- end -}}

{{/* A manager Deployment's name: (list root shard), shard "" for the default one. */}}
{{- define "guardedjob.deploymentName" -}}
{{- $root := index . 0 -}}{{- $shard := index . 1 -}}
{{ include "guardedjob.manager" $root }}{{ if $shard }}-shard-{{ $shard }}{{ end }}
{{- end -}}

{{/* Selects a manager Deployment's Pods: (list root shard). The default one keeps
guardedjob.selectorLabels; a shard's Pods carry another component, so that no
Deployment's selector matches another's Pods. */}}
{{- define "guardedjob.podSelectorLabels" -}}
{{- $root := index . 0 -}}{{- $shard := index . 1 -}}
{{- if $shard -}}
app.kubernetes.io/name: guardedjob
app.kubernetes.io/instance: {{ $root.Release.Name }}
app.kubernetes.io/component: manager-shard
batch.guardedjob.dev/shard: {{ $shard }}
{{- else -}}
{{ include "guardedjob.selectorLabels" $root }}
{{- end -}}
{{- end -}}

{{/* Selects every manager Pod of the release, of every shard (the metrics Service). */}}
{{- define "guardedjob.allManagersSelectorLabels" -}}
app.kubernetes.io/name: guardedjob
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "guardedjob.image" -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}
{{- end -}}

{{/* The Secret holding the lock store's URL: the user's, or the chart's own. */}}
{{- define "guardedjob.redisSecret" -}}
{{- if and .Values.redis.existingSecret .Values.redis.url -}}
{{- fail "set only one of redis.existingSecret and redis.url" -}}
{{- else if .Values.redis.existingSecret -}}
{{- .Values.redis.existingSecret -}}
{{- else if .Values.redis.url -}}
{{ include "guardedjob.fullname" . }}-redis
{{- else -}}
{{- fail "the lock store is required: set redis.existingSecret (a Secret with key url) or redis.url" -}}
{{- end -}}
{{- end -}}

{{/* --key-grants in flag syntax from a map of namespace to prefixes. */}}
{{- define "guardedjob.keyGrants" -}}
{{- $pairs := list -}}
{{- range $ns := keys .Values.keyGrants | sortAlpha -}}
{{- range $prefix := index $.Values.keyGrants $ns -}}
{{- $pairs = append $pairs (printf "%s=%s" $ns $prefix) -}}
{{- end -}}
{{- end -}}
{{- join "," $pairs -}}
{{- end -}}

{{/* The ServiceAccount the manager runs as: the chart's, or one the user made. */}}
{{- define "guardedjob.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "guardedjob.manager" .) .Values.serviceAccount.name -}}
{{- else if .Values.serviceAccount.name -}}
{{- .Values.serviceAccount.name -}}
{{- else -}}
{{- fail "serviceAccount.create is false: set serviceAccount.name to the ServiceAccount the manager runs as (the chart binds its roles to it)" -}}
{{- end -}}
{{- end -}}

{{/* Value combinations the schema cannot refuse. */}}
{{- define "guardedjob.validate" -}}
{{- if and (gt (int .Values.replicaCount) 1) (not .Values.leaderElection.enabled) -}}
{{- fail (printf "replicaCount is %d with leaderElection.enabled false: every replica would reconcile the same GuardedJobs at once. Enable leader election, or set replicaCount to 1" (int .Values.replicaCount)) -}}
{{- end -}}
{{- end -}}

{{/* The Secret with the metrics server's certificate (tls.crt, tls.key, ca.crt), or
nothing: the manager then makes a self-signed one. */}}
{{- define "guardedjob.metricsCertSecret" -}}
{{- $tls := .Values.metrics.tls -}}
{{- if and .Values.metrics.enabled (or $tls.existingSecret $tls.certManager.enabled) -}}
{{- if not .Values.metrics.secure -}}
{{- fail "metrics.tls gives a certificate, but metrics.secure is false (plain HTTP): set metrics.secure=true or drop metrics.tls" -}}
{{- else if and $tls.existingSecret $tls.certManager.enabled -}}
{{- fail "set only one of metrics.tls.existingSecret and metrics.tls.certManager.enabled" -}}
{{- else if $tls.existingSecret -}}
{{- $tls.existingSecret -}}
{{- else -}}
{{ include "guardedjob.fullname" . }}-metrics-cert
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The DNS name scrapers in the cluster reach the metrics Service by. */}}
{{- define "guardedjob.metricsServiceDNS" -}}
{{ include "guardedjob.manager" . }}-metrics.{{ .Release.Namespace }}.svc
{{- end -}}

{{/* A PromQL expression (or Grafana query) of config/prometheus or config/grafana with
the cluster label, written "cluster" there, renamed: (list EXPR LABEL). "$cluster", a
Grafana variable, stays. */}}
{{- define "guardedjob.withClusterLabel" -}}
{{- regexReplaceAll "(^|[^$\\w])cluster\\b" (index . 0) (printf "${1}%s" (index . 1)) -}}
{{- end -}}
