{{/* The release's name for its objects: the release name, with the chart's name unless it holds it. */}}
{{- define "meridian.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "meridian.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: hub
{{- end -}}

{{- define "meridian.labels" -}}
{{ include "meridian.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "meridian.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "meridian.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* An image reference: registry/repository:tag, or @digest when one is pinned. */}}
{{- define "meridian.image" -}}
{{- $image := index .root.Values.image .component -}}
{{- $repository := printf "%s/%s" .root.Values.image.registry $image.repository -}}
{{- if $image.digest -}}
{{- printf "%s@%s" $repository $image.digest -}}
{{- else -}}
{{- printf "%s:%s" $repository (default .root.Chart.AppVersion .root.Values.image.tag) -}}
{{- end -}}
{{- end -}}

{{/*
The hub's domain grants as MERIDIAN_DOMAIN_GRANTS reads them: NAMESPACE=SUFFIX,SUFFIX;...
*/}}
{{- define "meridian.domainGrants" -}}
{{- $grants := list -}}
{{- range . -}}
{{- $grants = append $grants (printf "%s=%s" .namespace (join "," .domains)) -}}
{{- end -}}
{{- join ";" $grants -}}
{{- end -}}

{{/* imagePullSecrets of every pod the chart runs (image.pullSecrets). */}}
{{- define "meridian.imagePullSecrets" -}}
{{- with .Values.image.pullSecrets }}
imagePullSecrets:
{{- range . }}
  - name: {{ . }}
{{- end }}
{{- end }}
{{- end }}
