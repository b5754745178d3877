{{/*
Refuses, with the fix, a release whose CRD template (crds.enabled) would take over CRDs it does not own:
those another release manages (the CRDs are the cluster's, one release manages them and the others set
crds.enabled=false), and those applied outside Helm (kubectl apply of crds/, or a chart that installed
them from crds/), which Helm would refuse with an ownership error that does not say what to do.
`lookup` finds nothing under `helm template` and client-side dry runs, so rendering offline checks nothing.
*/}}
{{- define "towline.checkCrdOwner" -}}
{{- range $name := list "approvals.towline.dev" "clustersteptypes.towline.dev" "steptypes.towline.dev" "workflowruns.towline.dev" "workflows.towline.dev" }}
{{- with lookup "apiextensions.k8s.io/v1" "CustomResourceDefinition" "" $name }}
{{- $annotations := .metadata.annotations | default dict }}
{{- $release := get $annotations "meta.helm.sh/release-name" }}
{{- $namespace := get $annotations "meta.helm.sh/release-namespace" }}
{{- if not $release }}
{{- fail (printf "crds.enabled: the CRD %s exists and no Helm release manages it (it was applied with kubectl, or installed from a chart's crds/): either keep applying the CRDs yourself and set crds.enabled=false, or let this release manage them: kubectl label crd -l app.kubernetes.io/part-of=towline app.kubernetes.io/managed-by=Helm --overwrite && kubectl annotate crd -l app.kubernetes.io/part-of=towline meta.helm.sh/release-name=%s meta.helm.sh/release-namespace=%s --overwrite" $name $.Release.Name $.Release.Namespace) }}
{{- end }}
{{- if not (and (eq $release $.Release.Name) (eq $namespace $.Release.Namespace)) }}
{{- fail (printf "crds.enabled: the CRD %s is managed by Towline release %q in namespace %s, and the CRDs are one per cluster: set crds.enabled=false for this release" $name $release $namespace) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
