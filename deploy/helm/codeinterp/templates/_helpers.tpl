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

{{/* The labels selecting the pods Envoy runs in: in a fleet, the gateways only. */}}
{{- define "codeinterp.gatewaySelector" -}}
{{ include "codeinterp.selector" . }}
{{- if eq (include "codeinterp.topology" .) "fleet" }}
app.kubernetes.io/component: gateway
{{- end }}
{{- end -}}

{{- define "codeinterp.sandboxSelector" -}}
{{ include "codeinterp.selector" . }}
app.kubernetes.io/component: sandbox
{{- end -}}

{{- define "codeinterp.sandboxName" -}}
{{- printf "%s-codeinterp-sandbox" .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The Secret holding the fleet secret (key "secret"). */}}
{{- define "codeinterp.fleetSecretName" -}}
{{- .Values.fleet.secret.existingSecret | default (printf "%s-codeinterp-fleet" .Release.Name | trunc 63 | trimSuffix "-") -}}
{{- end -}}

{{/* The topology, checked: sidecar or fleet, and a fleet's required values. */}}
{{- define "codeinterp.topology" -}}
{{- $t := .Values.topology -}}
{{- if not (has $t (list "sidecar" "fleet")) -}}
{{- fail (printf "topology: %q is not one of sidecar, fleet" $t) -}}
{{- end -}}
{{- if eq $t "fleet" -}}
{{- if not .Values.fleet.redis.addresses -}}
{{- fail "fleet.redis.addresses: the fleet topology needs a Redis (the chart deploys none)" -}}
{{- end -}}
{{- if and (not .Values.fleet.secret.existingSecret) (lt (len .Values.fleet.secret.value) 32) -}}
{{- fail "fleet.secret: set value (at least 32 bytes) or existingSecret (a Secret with the key \"secret\")" -}}
{{- end -}}
{{- end -}}
{{- $t -}}
{{- end -}}

{{/* The securityContext of a container of the gateway pod: the restricted Pod Security Standard. */}}
{{- define "codeinterp.restricted" -}}
securityContext:
  runAsNonRoot: true
  allowPrivilegeEscalation: false
  readOnlyRootFilesystem: true
  capabilities:
    drop: [ALL]
{{- end -}}
