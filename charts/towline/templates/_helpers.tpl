{{- define "towline.labels" -}}
app.kubernetes.io/name: towline
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "towline.operatorUser" -}}
system:serviceaccount:{{ .Release.Namespace }}:{{ .Values.serviceAccount.name }}
{{- end }}

{{/* The operator's image: repository:tag, pinned by image.digest when one is set (the tag then only names it). */}}
{{- define "towline.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}{{ with .Values.image.digest }}@{{ . }}{{ end }}
{{- end }}

{{/* The image step Jobs run: runner.image, else the lean runner image published beside the operator's
     (pinned by runner.digest when one is set; a runner.image carries its own digest). */}}
{{- define "towline.runnerImage" -}}
{{- if .Values.runner.image -}}
{{- if .Values.runner.digest -}}
{{- fail "runner.digest pins the default runner image only: with runner.image set, write the digest into it (registry.example.com/towline-runner:0.1.0@sha256:...) and unset runner.digest" -}}
{{- end -}}
{{ .Values.runner.image }}
{{- else -}}
{{ printf "%s-runner:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) }}{{ with .Values.runner.digest }}@{{ . }}{{ end }}
{{- end -}}
{{- end }}

{{/* Labels that select the operator's pods (Deployment, Service, PDB, NetworkPolicy). */}}
{{- define "towline.operatorSelector" -}}
app.kubernetes.io/name: towline
app.kubernetes.io/component: operator
{{- end }}

{{/* Labels that select the webhook ingress's pods (its Deployment is in ingress.yaml). */}}
{{- define "towline.ingressSelector" -}}
app.kubernetes.io/name: towline
app.kubernetes.io/component: ingress
{{- end }}

{{/*
What the operator may do in a namespace it runs workflows in: rendered once,
as a ClusterRole (cluster-wide) or as a Role in each of .Values.watchNamespaces.
Nothing on Secrets: step pods mount the Secrets they name, and the operator
learns of a missing one from the pod's status.
*/}}
{{- define "towline.operatorRules" -}}
- apiGroups: [towline.dev]
  resources: [workflows]
  verbs: [get, list, watch]
- apiGroups: [towline.dev]
  resources: [workflows/status]
  verbs: [get, patch, update]
- apiGroups: [towline.dev]
  resources: [workflowruns]
  # patch: only spec.cancel, for the Replace concurrency policy
  verbs: [get, list, watch, create, delete, patch]
- apiGroups: [towline.dev]
  resources: [workflowruns/status]
  verbs: [get, patch, update]
- apiGroups: [towline.dev]
  resources: [approvals]
  verbs: [get, list, watch, create, delete]
- apiGroups: [towline.dev]
  resources: [steptypes]
  verbs: [get, list, watch]
- apiGroups: [towline.dev]
  resources: [steptypes/status]
  verbs: [get, patch, update]
- apiGroups: [towline.dev]
  resources: [approvals/status]
  verbs: [get, patch, update]
- apiGroups: [batch]
  resources: [jobs]
  verbs: [get, list, watch, create, delete]
- apiGroups: [""]
  resources: [pods]
  verbs: [get, list, watch]
- apiGroups: [networking.k8s.io]
  resources: [networkpolicies]
  # update: a default-deny policy somebody opened up is put back before the next step starts;
  # watch: the operator learns of such a change without reading the policy before every step
  verbs: [get, list, watch, create, update, delete]
- apiGroups: ["", events.k8s.io]
  resources: [events]
  verbs: [create, patch]
{{- end }}

{{/*
A digest of everything the operator's pods are configured from; in the pod
template, so that any change of it rolls the Deployment.
*/}}
{{- define "towline.operatorConfigChecksum" -}}
{{- list .Values.image .Values.runner .Values.operator .Values.watchNamespaces .Values.serviceAccount .Values.stepTypes (include "towline.stepImagePullSecrets" .) .Values.stepPods | toJson | sha256sum -}}
{{- end }}

{{/*
Where one of the release's pods may run, from its component's values (operator, ingress or
tests): nodeSelector, tolerations, affinity, topologySpreadConstraints and priorityClassName,
each only when set. Pod spec fields, to be indented to the pod spec.
*/}}
{{- define "towline.podPlacement" -}}
{{- with .nodeSelector }}
nodeSelector: {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .tolerations }}
tolerations: {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .affinity }}
affinity: {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .topologySpreadConstraints }}
topologySpreadConstraints: {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .priorityClassName }}
priorityClassName: {{ . | quote }}
{{- end }}
{{- end }}

{{/*
The pull secrets of step pods, comma separated (the operator's TOWLINE_STEP_IMAGE_PULL_SECRETS):
stepPods.imagePullSecrets, else the top-level imagePullSecrets. `default dict`: a release upgraded
with --reuse-values from a chart without stepPods renders too.
*/}}
{{- define "towline.stepImagePullSecrets" -}}
{{- $names := list }}
{{- range (.Values.stepPods | default dict).imagePullSecrets | default .Values.imagePullSecrets }}
{{- $names = append $names .name }}
{{- end }}
{{- join "," $names }}
{{- end }}

{{/* Egress rules of Towline's own pods: the API server and cluster DNS only. */}}
{{- define "towline.apiServerAndDnsEgress" -}}
- to:
  {{- range .Values.networkPolicy.apiServer.cidrs }}
    - ipBlock: {cidr: {{ . | quote }}}
  {{- end }}
  ports:
  {{- range .Values.networkPolicy.apiServer.ports }}
    - {protocol: TCP, port: {{ . }}}
  {{- end }}
- to:
    - namespaceSelector:
        matchLabels: {kubernetes.io/metadata.name: {{ .Values.networkPolicy.dns.namespace | quote }}}
      podSelector:
        matchLabels: {{- toYaml .Values.networkPolicy.dns.podLabels | nindent 10 }}
  ports:
    - {protocol: UDP, port: 53}
    - {protocol: TCP, port: 53}
{{- end }}

{{- define "towline.ingressUser" -}}
system:serviceaccount:{{ .Release.Namespace }}:{{ .Values.ingress.serviceAccount.name }}
{{- end }}

{{- /*
CEL list literals of the users and groups trusted to create webhook and schedule runs:
the operator, the ingress and .Values.trustedTriggerRunCreators.
*/ -}}
{{- define "towline.triggerRunCreatorUsers" -}}
{{- $users := list (include "towline.operatorUser" . | quote) (include "towline.ingressUser" . | quote) }}
{{- range .Values.trustedTriggerRunCreators }}
{{- if kindIs "string" . }}
{{- $users = append $users (. | quote) }}
{{- else if hasKey . "user" }}
{{- $users = append $users (.user | quote) }}
{{- else if hasKey . "serviceAccount" }}
{{- $parts := splitList "/" .serviceAccount }}
{{- if ne (len $parts) 2 }}{{ fail (printf "trustedTriggerRunCreators: serviceAccount %q must be NAMESPACE/NAME" .serviceAccount) }}{{ end }}
{{- $users = append $users (printf "system:serviceaccount:%s:%s" (index $parts 0) (index $parts 1) | quote) }}
{{- else if not (hasKey . "group") }}
{{- fail (printf "trustedTriggerRunCreators: entry %v must be a user name or one of user, group, serviceAccount" .) }}
{{- end }}
{{- end }}
{{- printf "[%s]" (join ", " $users) }}
{{- end }}

{{- define "towline.triggerRunCreatorGroups" -}}
{{- $groups := list }}
{{- range .Values.trustedTriggerRunCreators }}
{{- if and (kindIs "map" .) (hasKey . "group") }}
{{- $groups = append $groups (.group | quote) }}
{{- end }}
{{- end }}
{{- printf "[%s]" (join ", " $groups) }}
{{- end }}

{{- /*
Controllers that legitimately rewrite ownerReferences and finalizers of any object
(the garbage collector, with or without per-controller credentials).
*/ -}}
{{- define "towline.metadataControllers" -}}
["system:serviceaccount:kube-system:generic-garbage-collector", "system:kube-controller-manager"]
{{- end }}

{{- /*
CEL list literal of the identities that create step pods: the Job controller, with per-controller
credentials (kubeadm, kind, the local dev cluster) or without, and .Values.stepPodCreators.
*/ -}}
{{- define "towline.stepPodCreators" -}}
{{- $users := list ("system:serviceaccount:kube-system:job-controller" | quote) ("system:kube-controller-manager" | quote) }}
{{- range .Values.stepPodCreators }}
{{- $users = append $users (. | quote) }}
{{- end }}
{{- printf "[%s]" (join ", " $users) }}
{{- end }}
