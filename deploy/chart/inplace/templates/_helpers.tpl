{{- define "inplace.labels" -}}
app.kubernetes.io/name: inplace
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}
{{- define "inplace.controllerSelector" -}}
app.kubernetes.io/name: inplace
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: controller
{{- end -}}
{{- define "inplace.daemonSelector" -}}
app.kubernetes.io/name: inplace
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: daemon
{{- end -}}
{{- define "inplace.controllerLabels" -}}
{{ include "inplace.labels" . }}
app.kubernetes.io/component: controller
{{- end -}}
{{- define "inplace.daemonLabels" -}}
{{ include "inplace.labels" . }}
app.kubernetes.io/component: daemon
{{- end -}}
{{- define "inplace.image" -}}
{{ required "image.repository is required" .image.repository }}:{{ .image.tag | default .chart.AppVersion }}
{{- end -}}
