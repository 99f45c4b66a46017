{{- define "codeinterp.name" -}}
{{- printf "%s-codeinterp" .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "codeinterp.labels" -}}
app.kubernetes.io/name: codeinterp
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "codeinterp.selector" -}}
app.kubernetes.io/name: codeinterp
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}
