{{- define "towline.labels" -}}
app.kubernetes.io/name: towline
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "towline.operatorUser" -}}
system:serviceaccount:{{ .Release.Namespace }}:{{ .Values.serviceAccount.name }}
{{- end }}

{{- define "towline.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
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
