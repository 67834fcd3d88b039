{{/*
Names follow the helm create / cert-manager convention: <release>-<chart> unless the
release name already contains the chart name, at most 63 characters (a DNS label).
*/}}
{{- define "gpu-intent.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "gpu-intent.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/*
Cluster-scoped objects (ClusterRole, ClusterRoleBinding, MutatingWebhookConfiguration):
release names are unique only within a namespace, so the namespace is part of the name.
*/}}
{{- define "gpu-intent.clusterName" -}}
{{- printf "%s-%s" (include "gpu-intent.fullname" .) .Release.Namespace | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "gpu-intent.webhookName" -}}{{ include "gpu-intent.fullname" . }}-webhook{{- end -}}
{{- define "gpu-intent.controllerName" -}}{{ include "gpu-intent.fullname" . }}-controller{{- end -}}
{{- define "gpu-intent.certsName" -}}{{ include "gpu-intent.fullname" . }}-certs{{- end -}}
{{/* The Secret with tls.crt, tls.key and ca.crt, written by cert-manager or by gpu-intent certs. */}}
{{- define "gpu-intent.tlsSecret" -}}{{ include "gpu-intent.fullname" . }}-tls{{- end -}}

{{- define "gpu-intent.serviceAccountName.webhook" -}}
{{- default (include "gpu-intent.webhookName" .) .Values.webhook.serviceAccount.name -}}
{{- end -}}
{{- define "gpu-intent.serviceAccountName.controller" -}}
{{- default (include "gpu-intent.controllerName" .) .Values.controller.serviceAccount.name -}}
{{- end -}}

{{- define "gpu-intent.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "gpu-intent.labels" -}}
helm.sh/chart: {{ include "gpu-intent.chart" . }}
{{ include "gpu-intent.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "gpu-intent.selectorLabels" -}}
app.kubernetes.io/name: {{ include "gpu-intent.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "gpu-intent.image" -}}
{{- $tag := default .Chart.AppVersion .Values.image.tag -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ $tag }}
{{- end -}}
{{- end -}}

{{/* The restricted Pod Security Standard, for every pod of the chart. */}}
{{- define "gpu-intent.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: {{ .Values.securityContext.runAsUser }}
runAsGroup: {{ .Values.securityContext.runAsGroup }}
fsGroup: {{ .Values.securityContext.runAsGroup }}
seccompProfile: {type: RuntimeDefault}
{{- end -}}
{{- define "gpu-intent.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
runAsNonRoot: true
capabilities: {drop: ["ALL"]}
seccompProfile: {type: RuntimeDefault}
{{- end -}}

{{/* Scheduling fields shared by every pod: $ is the root, .c the component's values. */}}
{{- define "gpu-intent.scheduling" -}}
{{- $c := .c -}}
{{- with $c.priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- with $c.nodeSelector }}
nodeSelector: {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $c.tolerations }}
tolerations: {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $c.affinity }}
affinity: {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .root.Values.imagePullSecrets }}
imagePullSecrets: {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* The pod of the certs Job and CronJob: one `gpu-intent certs` run. */}}
{{- define "gpu-intent.certsPodSpec" -}}
serviceAccountName: {{ include "gpu-intent.certsName" . }}
restartPolicy: OnFailure
enableServiceLinks: false
securityContext: {{- include "gpu-intent.podSecurityContext" . | nindent 2 }}
{{- include "gpu-intent.scheduling" (dict "root" . "c" .Values.controller) }}
containers:
  - name: certs
    image: {{ include "gpu-intent.image" . | quote }}
    imagePullPolicy: {{ .Values.image.pullPolicy }}
    args:
      - --log-level={{ .Values.logLevel }}
      - certs
      - --secret
      - {{ include "gpu-intent.tlsSecret" . }}
      - --namespace
      - {{ .Release.Namespace }}
      - --service
      - {{ include "gpu-intent.webhookName" . }}
      - --webhook-configuration
      - {{ include "gpu-intent.clusterName" . }}
      - --days={{ .Values.certs.days }}
      - --ca-days={{ .Values.certs.caDays }}
      - --renew-before-days={{ .Values.certs.renewBeforeDays }}
    env:
      - {name: LOG_FORMAT, value: {{ .Values.logFormat | quote }}}
    resources: {{- toYaml .Values.certs.resources | nindent 6 }}
    securityContext: {{- include "gpu-intent.containerSecurityContext" . | nindent 6 }}
{{- end -}}
