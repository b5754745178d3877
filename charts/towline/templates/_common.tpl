{{/*
The chart's common knobs, as cert-manager's chart has them: labels on every object and pod, pull secrets,
security contexts within Pod Security "restricted", extra volumes, ServiceAccounts and Service annotations.
Each is read from its component's values (operator, ingress, archive, ui or tests) where it is per component.
*/}}

{{/* commonLabels, without the chart's own keys (they name and select the release's objects). */}}
{{- define "towline.commonLabels" -}}
{{- with omit (.Values.commonLabels | default dict) "app.kubernetes.io/name" "app.kubernetes.io/instance" "app.kubernetes.io/version" "app.kubernetes.io/managed-by" "app.kubernetes.io/component" "helm.sh/chart" }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* podLabels, without the keys the Deployments select their pods by. */}}
{{- define "towline.podLabels" -}}
{{- with omit (.Values.podLabels | default dict) "app.kubernetes.io/name" "app.kubernetes.io/instance" "app.kubernetes.io/component" }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* The pull secrets of the release's own pods: global.imagePullSecrets and imagePullSecrets, each name once.
A pod spec field, to be indented to the pod spec. */}}
{{- define "towline.imagePullSecrets" -}}
{{- $names := list }}
{{- range concat ((.Values.global | default dict).imagePullSecrets | default list) (.Values.imagePullSecrets | default list) }}
{{- $names = append $names .name }}
{{- end }}
{{- with uniq $names }}
imagePullSecrets:
{{- range . }}
  - name: {{ . }}
{{- end }}
{{- end }}
{{- end }}

{{/* global.revisionHistoryLimit for a Deployment's spec, when set. */}}
{{- define "towline.revisionHistoryLimit" -}}
{{- $limit := (.Values.global | default dict).revisionHistoryLimit }}
{{- if not (kindIs "invalid" $limit) }}
revisionHistoryLimit: {{ $limit }}
{{- end }}
{{- end }}

{{/* A pod's security context: the chart's, with the component's podSecurityContext over it (the values schema
keeps that within Pod Security "restricted"). Takes (list DEFAULTS OVERRIDE). */}}
{{- define "towline.securityContext" -}}
{{- $context := mergeOverwrite (deepCopy (index . 0)) (deepCopy (index . 1 | default dict)) }}
{{- toYaml $context }}
{{- end }}

{{- define "towline.podSecurityDefaults" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
fsGroup: 65532
seccompProfile: {type: RuntimeDefault}
{{- end }}

{{- define "towline.containerSecurityDefaults" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
runAsNonRoot: true
capabilities: {drop: [ALL]}
seccompProfile: {type: RuntimeDefault}
{{- end }}

{{/* A component's pod and container security contexts, e.g. include "towline.podSecurityContext" .Values.operator */}}
{{- define "towline.podSecurityContext" -}}
{{- include "towline.securityContext" (list (fromYaml (include "towline.podSecurityDefaults" .)) .podSecurityContext) }}
{{- end }}

{{- define "towline.containerSecurityContext" -}}
{{- include "towline.securityContext" (list (fromYaml (include "towline.containerSecurityDefaults" .)) .containerSecurityContext) }}
{{- end }}

{{/* A component's ServiceAccount, unless its serviceAccount.create is false: then the user brings one of that
name (e.g. made by their cloud's workload identity tooling), and the chart's bindings name it all the same.
Takes (dict "root" $ "account" .Values.COMPONENT.serviceAccount "component" NAME-or-"" "automount" BOOL). */}}
{{- define "towline.serviceAccount" -}}
{{- $account := .account }}
{{- if $account.create | default (kindIs "invalid" $account.create) }}
apiVersion: v1
kind: ServiceAccount
metadata:
  name: {{ $account.name }}
  namespace: {{ .root.Release.Namespace }}
  labels: {{- include "towline.labels" .root | nindent 4 }}
    {{- with .component }}
    app.kubernetes.io/component: {{ . }}
    {{- end }}
  {{- with $account.annotations }}
  annotations: {{- toYaml . | nindent 4 }}
  {{- end }}
automountServiceAccountToken: {{ .automount }}
{{- end }}
{{- end }}

{{/* A PodDisruptionBudget's limit from a component's podDisruptionBudget: minAvailable when set, else
maxUnavailable; each a number or a percentage. */}}
{{- define "towline.disruptionLimit" -}}
{{- if not (kindIs "invalid" .minAvailable) }}
minAvailable: {{ .minAvailable }}
{{- else }}
maxUnavailable: {{ .maxUnavailable }}
{{- end }}
{{- end }}

{{/* serviceMonitor's scrapeTimeout, relabelings and metricRelabelings for an endpoint, when set. */}}
{{- define "towline.serviceMonitorEndpoint" -}}
{{- with .Values.serviceMonitor.scrapeTimeout }}
scrapeTimeout: {{ . }}
{{- end }}
{{- with .Values.serviceMonitor.relabelings }}
relabelings: {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.serviceMonitor.metricRelabelings }}
metricRelabelings: {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}
