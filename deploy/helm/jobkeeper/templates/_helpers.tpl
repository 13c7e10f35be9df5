{{/* The release's full name: the release name, or "<release>-jobkeeper". */}}
{{- define "jobkeeper.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* Labels that select the controller's pods. */}}
{{- define "jobkeeper.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* Labels of every object. */}}
{{- define "jobkeeper.labels" -}}
{{ include "jobkeeper.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/component: controller
app.kubernetes.io/part-of: jobkeeper
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "jobkeeper.serviceAccountName" -}}
{{- default (include "jobkeeper.fullname" .) .Values.serviceAccount.name -}}
{{- end -}}

{{- define "jobkeeper.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/* Fails the render on a controller name the binary does not know. */}}
{{- define "jobkeeper.validateControllers" -}}
{{- range .Values.controllers -}}
{{- if not (has . (list "job" "ttl-after-finished")) -}}
{{- fail (printf "controllers: unknown controller %q (known: job, ttl-after-finished)" .) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* PromQL label matchers of this release's series, for the alerting rules
and the dashboard: monitoring.selector, or the job label Prometheus Operator
gives the chart's ServiceMonitor (the metrics Service's name). */}}
{{- define "jobkeeper.monitoringSelector" -}}
{{- $sel := default (printf "job=%q" (printf "%s-metrics" (include "jobkeeper.fullname" .))) .Values.monitoring.selector -}}
{{- if or (contains "{" $sel) (contains "}" $sel) -}}
{{- fail (printf "monitoring.selector: give the label matchers without braces, e.g. job=\"jobkeeper-metrics\" (got %s)" $sel) -}}
{{- end -}}
{{- $sel -}}
{{- end -}}

{{/* The matcher written in files/prometheus-rules.yaml and
files/grafana-dashboard.json, which the chart replaces with the selector. */}}
{{- define "jobkeeper.monitoringPlaceholder" -}}
job="jobkeeper-metrics"
{{- end -}}

{{/* The content of a file under files/, failing the render if it is missing
(e.g. dropped by a .helmignore). */}}
{{- define "jobkeeper.file" -}}
{{- $content := .root.Files.Get .path -}}
{{- if not $content -}}
{{- fail (printf "the chart has no %s" .path) -}}
{{- end -}}
{{- $content -}}
{{- end -}}
