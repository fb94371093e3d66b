{{/*
Helpers of the trust-rotation-operator chart. Nothing here is random or looked up in the cluster:
the same values always render the same manifests.
*/}}

{{/* The chart name, or nameOverride. */}}
{{- define "trust-rotation-operator.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The full name of the release's resources: fullnameOverride, else the release name when it
contains the chart name, else <release>-<chart>. Truncated to 63 characters (a label value).
*/}}
{{- define "trust-rotation-operator.fullname" -}}
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

{{/* Selector labels: stable for the life of the release (a Deployment's selector is immutable). */}}
{{- define "trust-rotation-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "trust-rotation-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end }}

{{/* Labels of every resource. */}}
{{- define "trust-rotation-operator.labels" -}}
{{ include "trust-rotation-operator.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: linkerd-trust-rotation
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* The ServiceAccount the operator runs as. */}}
{{- define "trust-rotation-operator.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "trust-rotation-operator.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The image reference: repository@digest when a digest is set, else repository:tag. */}}
{{- define "trust-rotation-operator.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/* The namespace of the leader-election Lease. */}}
{{- define "trust-rotation-operator.leaseNamespace" -}}
{{- default .Release.Namespace .Values.operator.leaderElection.namespace }}
{{- end }}

{{/*
The namespace client-go's event recorder writes Events about a cluster-scoped object to: an
object without a namespace gets its Events in "default" (k8s.io/client-go/tools/record,
makeEvent). The TrustAnchorRotation is cluster-scoped, so this is where the operator's Events go.
*/}}
{{- define "trust-rotation-operator.eventsNamespace" -}}
default
{{- end }}

{{/* The metadata of a hook Job's pod template; the argument is (list $ "<component>"). */}}
{{- define "trust-rotation-operator.hookPodMetadata" -}}
{{- $ := index . 0 -}}
metadata:
  labels:
    app.kubernetes.io/name: {{ include "trust-rotation-operator.name" $ }}
    app.kubernetes.io/instance: {{ $.Release.Name }}
    app.kubernetes.io/component: {{ index . 1 }}
    {{- with $.Values.hooks.podLabels }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  {{- with $.Values.hooks.podAnnotations }}
  annotations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- end }}

{{/* The pod spec fields every hook Job shares with the operator's pods. */}}
{{- define "trust-rotation-operator.hookPodSpec" -}}
restartPolicy: Never
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.podSecurityContext }}
securityContext:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/* The container fields every hook Job shares: its output is its termination message on failure. */}}
{{- define "trust-rotation-operator.hookContainer" -}}
terminationMessagePolicy: FallbackToLogsOnError
{{- with .Values.hooks.resources }}
resources:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.securityContext }}
securityContext:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}
