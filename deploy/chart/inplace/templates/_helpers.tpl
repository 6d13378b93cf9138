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
{{- /* "inplace.imageRef" (dict "image" .Values.X.image "chart" .Chart "name" "X"): the
       image reference; fails the install at once, naming the value, when the repository
       is not set (no default names an image a stranger could publish). */ -}}
{{- define "inplace.imageRef" -}}
{{ required (printf "%s.image.repository is required: the repository you pushed the %s image to (e.g. --set %s.image.repository=<your registry>/inplace-%s; deploy/release builds the images)" .name .name .name .name) .image.repository }}:{{ .image.tag | default .chart.AppVersion }}
{{- end -}}
{{- /* Whether the server has admissionregistration.k8s.io/v1 ValidatingAdmissionPolicy
       (Kubernetes >= 1.30): by the server's version, and by its API discovery of that kind
       where Helm talks to one (the group version alone exists since 1.16, for webhooks);
       offline Helm knows no kinds: `helm template --kube-version 1.3x --api-versions
       admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy`. */ -}}
{{- define "inplace.admissionPolicies" -}}
{{- if and .Values.admissionPolicies.enabled (semverCompare ">=1.30-0" .Capabilities.KubeVersion.Version) (.Capabilities.APIVersions.Has "admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy") -}}
true
{{- end -}}
{{- end -}}
{{- /* "inplace.stripCel" MAP: removes every x-kubernetes-validations key (CEL rules) in
       place, for servers older than 1.25 that do not know the field. */ -}}
{{- define "inplace.stripCel" -}}
{{- if kindIs "map" . -}}
{{- $_ := unset . "x-kubernetes-validations" -}}
{{- range $k, $v := . }}{{ include "inplace.stripCel" $v }}{{ end -}}
{{- else if kindIs "slice" . -}}
{{- range . }}{{ include "inplace.stripCel" . }}{{ end -}}
{{- end -}}
{{- end -}}
