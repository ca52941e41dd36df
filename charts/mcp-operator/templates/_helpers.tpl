{{/* The chart's name, overridable. */}}
{{- define "mcp-operator.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The release's full name: the release name, with the chart name unless it contains it. */}}
{{- define "mcp-operator.fullname" -}}
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

{{- define "mcp-operator.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "mcp-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "mcp-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "mcp-operator.labels" -}}
helm.sh/chart: {{ include "mcp-operator.chart" . }}
{{ include "mcp-operator.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/component: controller
{{- end }}

{{- define "mcp-operator.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "mcp-operator.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The Lease the replicas elect their leader through (in the release namespace). */}}
{{- define "mcp-operator.leaseName" -}}
{{- default (include "mcp-operator.fullname" .) .Values.controller.leaseName }}
{{- end }}

{{/* The Secret holding the keys that sign every grants document. */}}
{{- define "mcp-operator.signingSecret" -}}
{{- printf "%s-grants-signing" (include "mcp-operator.fullname" .) }}
{{- end }}

{{- define "mcp-operator.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/* The injected sidecar's settings, as `mcp-operator controller --sidecar` reads them (JSON). */}}
{{- define "mcp-operator.sidecar" -}}
{{- $s := .Values.injection.sidecar }}
{{- $repository := default .Values.image.repository $s.image.repository }}
{{- $tag := default (default .Chart.AppVersion .Values.image.tag) $s.image.tag }}
{{- $settings := dict
  "image" (printf "%s:%s" $repository $tag)
  "imagePullPolicy" (default .Values.image.pullPolicy $s.image.pullPolicy)
  "port" (int $s.port)
  "healthPort" (int $s.healthPort)
  "logLevel" $s.logLevel
  "startupPeriodSeconds" (int $s.startupPeriodSeconds)
  "startupFailureThreshold" (int $s.startupFailureThreshold)
  "resources" $s.resources
  "securityContext" $s.securityContext
  "extraArgs" $s.extraArgs }}
{{- /* Unset (null): the sidecar's own default. */}}
{{- with $s.responseBudget }}{{ $_ := set $settings "responseBudget" (int64 .) }}{{ end }}
{{- /* Traces: only with an endpoint. */}}
{{- $t := .Values.telemetry }}
{{- with $t.otlp.endpoint }}
{{- $traces := dict "endpoint" . "protocol" $t.otlp.protocol }}
{{- if $t.otlp.headersSecret.name }}{{ $_ := set $traces "headersSecret" (dict "name" $t.otlp.headersSecret.name "key" $t.otlp.headersSecret.key) }}{{ end }}
{{- with $t.sampler }}{{ $_ := set $traces "sampler" . }}{{ end }}
{{- if ne (toString $t.samplerArg) "" }}{{ $_ := set $traces "samplerArg" (toString $t.samplerArg) }}{{ end }}
{{- with $t.resourceAttributes }}{{ $_ := set $traces "resourceAttributes" . }}{{ end }}
{{- $_ := set $settings "traces" $traces }}
{{- end }}
{{- $settings | toJson }}
{{- end }}
