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
