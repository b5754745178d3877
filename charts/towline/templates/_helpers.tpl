{{/*
The chart's name, and the prefix of every object's name: the release name if it contains the
chart's name (release `towline`: towline-operator, towline-runner ...), else <release>-<chart>;
fullnameOverride replaces it, nameOverride the chart's part. At most 47 characters, so that the
longest name derived from it (the Service <fullname>-ingress-metrics) is a valid DNS label.
*/}}
{{- define "towline.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "towline.fullname" -}}
{{- $fullname := "" }}
{{- if .Values.fullnameOverride }}
{{- $fullname = .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := include "towline.name" . }}
{{- if contains $name .Release.Name }}
{{- $fullname = .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $fullname = printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- if gt (len $fullname) 47 }}
{{- fail (printf "the objects' name prefix %q is longer than 47 characters (names such as %s-ingress-metrics must fit 63): choose a shorter release name, or set fullnameOverride" $fullname $fullname) }}
{{- end }}
{{- $fullname }}
{{- end }}

{{/*
Where a ValidatingAdmissionPolicyBinding applies, for policies that hold everyone in a namespace
to this release's operator and ingress (they name them as the only trusted identities): with
watchNamespaces, only those namespaces, so that another release's operator may act in its own;
empty, every namespace. kubernetes.io/metadata.name is set by the API server to the namespace's
own name, so no namespace can claim another's. Cluster-scoped objects (ClusterStepTypes) are
never skipped by a namespaceSelector: every release's policy applies to them.
*/}}
{{- define "towline.policyScope" -}}
{{- if .Values.watchNamespaces -}}
matchResources:
  namespaceSelector:
    matchExpressions:
      - key: kubernetes.io/metadata.name
        operator: In
        values: {{ toJson .Values.watchNamespaces }}
{{- end }}
{{- end }}

{{/*
Refuses an install or upgrade that would make two operators run the same namespace's workflows.
Another release's operator Deployment (labelled towline/operator, not this release's) says what it
watches in TOWLINE_WATCH_NAMESPACES; empty means every namespace. Two releases may share a cluster
only from different namespaces and with watchNamespaces that do not overlap. `lookup` finds
nothing under `helm template` and client-side dry runs, so rendering offline checks nothing.
*/}}
{{- define "towline.checkOtherReleases" -}}
{{- $mine := .Values.watchNamespaces | default list }}
{{- range (lookup "apps/v1" "Deployment" "" "").items | default list }}
{{- $labels := .metadata.labels | default dict }}
{{- $annotations := .metadata.annotations | default dict }}
{{- if and (eq (get $labels "app.kubernetes.io/name") "towline") (eq (get $labels "app.kubernetes.io/component") "operator") }}
{{- $release := get $annotations "meta.helm.sh/release-name" | default (get $labels "app.kubernetes.io/instance") }}
{{- $releaseNamespace := get $annotations "meta.helm.sh/release-namespace" | default .metadata.namespace }}
{{- if not (and (eq $release $.Release.Name) (eq $releaseNamespace $.Release.Namespace)) }}
{{- $other := printf "Towline release %q in namespace %s" $release .metadata.namespace }}
{{- if eq .metadata.namespace $.Release.Namespace }}
{{- fail (printf "%s already runs an operator there: install each release in a namespace of its own" $other) }}
{{- end }}
{{- $theirs := list }}
{{- range .spec.template.spec.containers }}
{{- range .env | default list }}
{{- if and (eq .name "TOWLINE_WATCH_NAMESPACES") .value }}
{{- $theirs = splitList "," .value }}
{{- end }}
{{- end }}
{{- end }}
{{- if not $theirs }}
{{- fail (printf "%s runs workflows in every namespace (its watchNamespaces is empty): no second release can share the cluster with it; give it watchNamespaces first (helm upgrade)" $other) }}
{{- end }}
{{- if not $mine }}
{{- fail (printf "%s already runs workflows in %s: a second release needs watchNamespaces of its own, not every namespace" $other (join ", " $theirs)) }}
{{- end }}
{{- $shared := list }}
{{- range $mine }}
{{- if has . $theirs }}
{{- $shared = append $shared . }}
{{- end }}
{{- end }}
{{- if $shared }}
{{- fail (printf "%s already runs workflows in %s: two operators must not run the same namespace's workflows; remove it from watchNamespaces" $other (join ", " $shared)) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}

{{- define "towline.labels" -}}
app.kubernetes.io/name: towline
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- include "towline.commonLabels" . }}
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
# a step Job's end: the operator keeps its step Jobs (spec.managedBy), not the Job controller
- apiGroups: [batch]
  resources: [jobs/status]
  verbs: [patch]
# create: each step Job's one pod (towline.k8s.steppods), held to a step's shape by the step-objects policy;
# patch: only to remove its finalizer towline.dev/step-result once the pod's end is written on its Job;
# delete: a step pod that has not ended at the step's deadline (one never scheduled, which no kubelet stops)
- apiGroups: [""]
  resources: [pods]
  verbs: [get, list, watch, create, patch, delete]
- apiGroups: [networking.k8s.io]
  resources: [networkpolicies]
  # update: a default-deny policy somebody opened up is put back before the next step starts;
  # watch: the operator learns of such a change without reading the policy before every step
  verbs: [get, list, watch, create, update, delete]
- apiGroups: ["", events.k8s.io]
  resources: [events]
  verbs: [create, patch]
{{- if .Values.codeSteps.enabled }}
# get only: when a run starts, the ConfigMaps its code.wasm steps take their modules from are checked as the
# runner will check them (never listed or watched; nothing of their content is written anywhere)
- apiGroups: [""]
  resources: [configmaps]
  verbs: [get]
{{- end }}
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
stepPods.imagePullSecrets, else global.imagePullSecrets and the top-level imagePullSecrets. `default dict`:
a release upgraded with --reuse-values from a chart without stepPods renders too.
*/}}
{{- define "towline.stepImagePullSecrets" -}}
{{- $names := list }}
{{- $release := concat ((.Values.global | default dict).imagePullSecrets | default list) (.Values.imagePullSecrets | default list) }}
{{- range (.Values.stepPods | default dict).imagePullSecrets | default $release }}
{{- $names = append $names .name }}
{{- end }}
{{- join "," (uniq $names) }}
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
CEL list literal of the identities besides the operator that create step pods: the Job controller (for step
Jobs an earlier release made; the operator's say managedBy: towline.dev/operator), with per-controller
credentials (kubeadm, kind, the local dev cluster) or without, and .Values.stepPodCreators. The operator's own
requests meet towline-step-objects' rule for the operator instead.
*/ -}}
{{- define "towline.stepPodCreators" -}}
{{- $users := list ("system:serviceaccount:kube-system:job-controller" | quote) ("system:kube-controller-manager" | quote) }}
{{- range .Values.stepPodCreators }}
{{- $users = append $users (. | quote) }}
{{- end }}
{{- printf "[%s]" (join ", " $users) }}
{{- end }}

{{- define "towline.archiveUser" -}}
system:serviceaccount:{{ .Release.Namespace }}:{{ .Values.archive.serviceAccount.name }}
{{- end }}

{{- /* What the archive may do in a namespace it records (towline.archive.service). */ -}}
{{- define "towline.archiveRules" -}}
- apiGroups: [towline.dev]
  resources: [workflowruns, approvals]
  verbs: [get, list, watch]
# patch: only to remove the finalizer towline.dev/archive (towline-archive-releases holds it to that)
- apiGroups: [towline.dev]
  resources: [workflowruns]
  verbs: [patch]
# step pods, to read each one's log when it ends (the runner redacts what it prints)
- apiGroups: [""]
  resources: [pods]
  verbs: [get, list, watch]
- apiGroups: [""]
  resources: [pods/log]
  verbs: [get]
# patch: a step Job's ttlSecondsAfterFinished, once its pod's logs are in the record (towline-step-objects holds
# it to setting that one field where it was unset)
- apiGroups: [batch]
  resources: [jobs]
  verbs: [patch]
{{- end }}
