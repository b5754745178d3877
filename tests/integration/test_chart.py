"""The Helm chart: it lints, renders, refuses bad values by name, and its values reach its policies.

Rendered with the pinned helm (`helm template`); nothing here needs a cluster.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml
from tests.integration.helmsupport import find, helm, render, template

from towline.engine.naming import STEP_JOB_PREFIX
from towline.runtime.config import OperatorConfig, step_image_policy
from towline_dev.binaries import BinarySet
from towline_dev.install import CHART
from towline_dev.versions import KUBERNETES_VERSION

pytestmark = pytest.mark.integration

OPERATOR_POD_LABELS = {"app.kubernetes.io/name": "towline", "app.kubernetes.io/component": "operator"}
INGRESS_POD_LABELS = {"app.kubernetes.io/name": "towline", "app.kubernetes.io/component": "ingress"}


def test_chart_lints_cleanly(k8s_binaries: BinarySet) -> None:
    result = helm(k8s_binaries, "lint", str(CHART), "--strict", "--kube-version", KUBERNETES_VERSION)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_built_in_roles_get_towline_resources_but_not_step_types_or_approval_decisions(
    k8s_binaries: BinarySet,
) -> None:
    """What `view` and `edit` users may then do is proved through the API server (test_api.py); here, the roles."""
    documents = render(k8s_binaries)
    view = find(documents, "ClusterRole", "towline-aggregate-to-view")
    edit = find(documents, "ClusterRole", "towline-aggregate-to-edit")
    assert view["metadata"]["labels"]["rbac.authorization.k8s.io/aggregate-to-view"] == "true"
    assert edit["metadata"]["labels"]["rbac.authorization.k8s.io/aggregate-to-edit"] == "true"
    assert all(set(rule["verbs"]) == {"get", "list", "watch"} for rule in view["rules"])
    written = {resource for rule in edit["rules"] for resource in rule["resources"]}
    assert written == {"workflows", "workflowruns"}, edit["rules"]
    off = render(k8s_binaries, {"rbac.aggregateToDefaultRoles": "false"})
    assert not [d for d in off if d["kind"] == "ClusterRole" and "aggregate" in d["metadata"]["name"]]
    assert find(off, "ClusterRole", "towline-workflow-author")


def test_the_webhook_ingress_is_exposed_by_an_ingress_or_an_http_route_on_hooks_only(k8s_binaries: BinarySet) -> None:
    assert not [d for d in render(k8s_binaries) if d["kind"] in ("Ingress", "HTTPRoute")]
    ingress = find(render(k8s_binaries, {
        "ingress.expose.ingress.enabled": "true", "ingress.expose.ingress.host": "hooks.example.com",
        "ingress.expose.ingress.className": "nginx", "ingress.expose.ingress.tls.secretName": "hooks-tls",
        "ingress.expose.ingress.annotations": '{"cert-manager.io/cluster-issuer": "letsencrypt"}',
    }), "Ingress", "towline-ingress")
    assert ingress["spec"]["ingressClassName"] == "nginx"
    assert ingress["spec"]["tls"] == [{"hosts": ["hooks.example.com"], "secretName": "hooks-tls"}]
    (path,) = ingress["spec"]["rules"][0]["http"]["paths"]
    assert (path["path"], path["pathType"], path["backend"]["service"]) == (
        "/hooks/", "Prefix", {"name": "towline-ingress", "port": {"name": "http"}})
    assert ingress["metadata"]["annotations"] == {"cert-manager.io/cluster-issuer": "letsencrypt"}
    route = find(render(k8s_binaries, {
        "ingress.expose.httpRoute.enabled": "true", "ingress.expose.httpRoute.hostnames": '["hooks.example.com"]',
        "ingress.expose.httpRoute.parentRefs": '[{"name": "public", "namespace": "gateways"}]',
    }), "HTTPRoute", "towline-ingress")
    assert route["spec"]["parentRefs"] == [{"name": "public", "namespace": "gateways"}]
    (rule,) = route["spec"]["rules"]
    assert rule["matches"] == [{"path": {"type": "PathPrefix", "value": "/hooks/"}}]
    assert rule["backendRefs"] == [{"name": "towline-ingress", "port": 80}]


def test_helm_template_renders_without_naming_a_kubernetes_version(k8s_binaries: BinarySet) -> None:
    """Offline, helm assumes the Kubernetes version it was built against: the chart's >=1.30 must hold for it."""
    result = helm(k8s_binaries, "template", "towline", str(CHART))
    assert result.returncode == 0, result.stderr
    assert "kind: Deployment" in result.stdout


def test_step_jobs_values_reach_the_step_objects_policy(k8s_binaries: BinarySet) -> None:
    """What the operator may create is proved by attack (attacks/test_attack_operator_jobs.py); here, that
    the values reach the policy: the runner image plus stepJobs.images, and the excluded namespaces
    (templates: the default names the release namespace)."""
    def policy(values: dict[str, str]) -> dict[str, Any]:
        found: dict[str, Any] = find(render(k8s_binaries, values), "ValidatingAdmissionPolicy", "towline-step-objects")
        return found

    def images(values: dict[str, str]) -> str:
        return str(next(v["expression"] for v in policy(values)["spec"]["variables"] if v["name"] == "images"))

    assert images({"runner.image": "r.example/runner:1"}) == '["r.example/runner:1"]'
    assert images({"runner.image": "r.example/runner:1", "stepJobs.images": '["r.example/step:2"]'}) == \
        '["r.example/runner:1", "r.example/step:2"]'
    excluded = policy({})["spec"]["validations"][0]["expression"]
    assert '["kube-system", "towline-system"]' in excluded, excluded
    assert '["team-x"]' in policy({"stepJobs.excludedNamespaces": '["team-x"]'})["spec"]["validations"][0]["expression"]


OPERATOR_DIGEST = "sha256:" + "1" * 64
RUNNER_DIGEST = "sha256:" + "2" * 64


def test_digests_pin_every_image_the_release_runs_and_the_policy_admits(k8s_binaries: BinarySet) -> None:
    """image.digest pins the operator's image in every pod of the release; runner.digest pins the default
    runner image, which the operator gives step Jobs and the step-objects policy admits (and no other)."""
    repository = "registry.example.com/towline"
    documents = render(k8s_binaries, {"image.repository": repository, "image.tag": "0.1.0",
                                      "image.digest": OPERATOR_DIGEST, "runner.digest": RUNNER_DIGEST})
    operator_image = f"{repository}:0.1.0@{OPERATOR_DIGEST}"
    runner_image = f"{repository}-runner:0.1.0@{RUNNER_DIGEST}"
    containers = [c for d in documents if d["kind"] in ("Deployment", "Pod")
                  for c in (d["spec"]["template"]["spec"] if d["kind"] == "Deployment" else d["spec"])["containers"]]
    # The operator, the ingress, the archive and the Helm test pod.
    assert len(containers) == 4 and {c["image"] for c in containers} == {operator_image}, containers
    operator = find(documents, "Deployment", "towline-operator")["spec"]["template"]["spec"]["containers"][0]
    assert {"name": "TOWLINE_RUNNER_IMAGE", "value": runner_image} in operator["env"]
    # Each process reports the image it runs (towline_build_info's image label).
    for deployment in ("towline-operator", "towline-ingress"):
        (container,) = find(documents, "Deployment", deployment)["spec"]["template"]["spec"]["containers"]
        assert {"name": "TOWLINE_IMAGE", "value": operator_image} in container["env"], deployment
    policy = find(documents, "ValidatingAdmissionPolicy", "towline-step-objects")
    images = next(v["expression"] for v in policy["spec"]["variables"] if v["name"] == "images")
    assert images == f'["{runner_image}"]'


def test_runner_digest_beside_runner_image_is_refused_with_the_fix(k8s_binaries: BinarySet) -> None:
    result = template(k8s_binaries, {"runner.image": "r.example/runner:1", "runner.digest": RUNNER_DIGEST})
    assert result.returncode != 0
    assert "runner.digest pins the default runner image only" in result.stderr, result.stderr
    assert "write the digest into it" in result.stderr, result.stderr


def test_step_type_values_reach_the_operator_and_both_policies(k8s_binaries: BinarySet) -> None:
    """Who may register which images is proved by attack (attacks/test_attack_step_types.py,
    test_attack_operator_jobs.py); here, that stepTypes.* reach the operator and both policies."""
    values = {"stepTypes.allowedImagePrefixes": '["r.example/steps","r.example/more/"]',
              "stepTypes.requireDigest": "true"}
    documents = render(k8s_binaries, values)
    env = {v["name"]: v.get("value") for v in _operator_pod(documents)["spec"]["containers"][0]["env"]}
    assert env["TOWLINE_STEP_TYPE_IMAGE_PREFIXES"] == "r.example/steps,r.example/more/"
    assert env["TOWLINE_STEP_TYPE_REQUIRE_DIGEST"] == "true"
    registration = find(documents, "ValidatingAdmissionPolicy", "towline-step-type-images")["spec"]
    prefixes = next(v["expression"] for v in registration["variables"] if v["name"] == "prefixes")
    # A prefix ends at a `/`, written or not: the same prefixes in both policies and in the operator.
    assert prefixes.strip() == '["r.example/steps/", "r.example/more/"]'
    assert list(step_image_policy(env).allowed_prefixes) == json.loads(prefixes)
    assert any("@sha256:" in rule["expression"] for rule in registration["validations"])
    jobs = find(documents, "ValidatingAdmissionPolicy", "towline-step-objects")["spec"]
    job_prefixes = next(v["expression"] for v in jobs["variables"] if v["name"] == "stepTypePrefixes")
    assert job_prefixes.strip() == prefixes.strip()
    default = render(k8s_binaries)
    plain = find(default, "ValidatingAdmissionPolicy", "towline-step-type-images")["spec"]
    assert next(v["expression"] for v in plain["variables"] if v["name"] == "prefixes").strip() == "[]"
    assert not any("@sha256:" in rule["expression"] for rule in plain["validations"])


def test_code_step_values_reach_the_operator_and_are_off_by_default(k8s_binaries: BinarySet) -> None:
    """Where code steps may run is proved through the operator (test_code_steps.py); here, that the values reach it."""
    def env(values: dict[str, str] | None = None) -> dict[str, Any]:
        pod = _operator_pod(render(k8s_binaries, values or {}))
        return {v["name"]: v.get("value") for v in pod["spec"]["containers"][0]["env"]}

    assert (env()["TOWLINE_CODE_STEPS"], env()["TOWLINE_CODE_STEP_NAMESPACES"]) == ("false", "")
    on = env({"codeSteps.enabled": "true", "codeSteps.namespaces": '["data","ml-*"]'})
    assert (on["TOWLINE_CODE_STEPS"], on["TOWLINE_CODE_STEP_NAMESPACES"]) == ("true", "data,ml-*")


def test_the_operator_may_get_config_maps_only_where_code_steps_are_on(k8s_binaries: BinarySet) -> None:
    """A code.wasm module in a ConfigMap is checked when its run starts; with code steps off the operator has no
    business reading ConfigMaps, and it never lists or watches them."""
    def config_map_rules(values: dict[str, str]) -> list[Any]:
        documents = render(k8s_binaries, values)
        rules = [rule for doc in documents if doc and doc["kind"] in ("ClusterRole", "Role")
                 and doc["metadata"]["name"].endswith("-operator") for rule in doc.get("rules") or []]
        assert rules, "the operator's rules were rendered"
        return [rule for rule in rules if "configmaps" in rule["resources"]]

    assert config_map_rules({}) == []
    assert config_map_rules({"codeSteps.enabled": "true"}) == [
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]}]
    scoped = config_map_rules({"codeSteps.enabled": "true", "watchNamespaces": '["team-a","team-b"]'})
    assert scoped == [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]}] * 2, "a Role per namespace"


def test_the_reserved_step_name_is_the_one_the_operator_names_jobs_with(k8s_binaries: BinarySet) -> None:
    documents = render(k8s_binaries)
    for name in ("towline-step-objects", "towline-step-pod-access"):
        spec = find(documents, "ValidatingAdmissionPolicy", name)["spec"]
        expressions = [entry["expression"] for key in ("matchConditions", "validations") for entry in spec.get(key, [])]
        assert any(f'startsWith("{STEP_JOB_PREFIX}")' in text for text in expressions), name


STEP_REQUESTS = [(group, resource, operation) for group, resource in (
    ("batch", "jobs"), ("batch", "jobs/status"), ("", "pods"), ("networking.k8s.io", "networkpolicies"))
    for operation in ("CREATE", "UPDATE", "DELETE")]
"""What the operator asks for each step (a Job, its pod, the Job's end, the finalizer's removal, an egress
policy, a cancel's deletions) and what others ask of step objects."""


@pytest.mark.parametrize("values", [{}, {"archive.enabled": "false"}, {"watchNamespaces": '["team-a"]'}])
def test_each_step_object_request_meets_one_policy_at_most(k8s_binaries: BinarySet, values: dict[str, str]) -> None:
    """The API server converts the object (and the old one) for every pass of every policy whose matchConstraints
    take a request, whatever its expressions name (docs/benchmarks.md): a step's requests, the busiest in the
    cluster, meet one policy, towline-step-objects, whose one match condition picks the rule for who asks."""
    policies = [d for d in render(k8s_binaries, values) if d["kind"] == "ValidatingAdmissionPolicy"]

    def meeting(group: str, resource: str, operation: str) -> list[str]:
        return [p["metadata"]["name"] for p in policies if any(
            group in rule["apiGroups"] and resource in rule["resources"] and operation in rule["operations"]
            for rule in p["spec"]["matchConstraints"]["resourceRules"])]

    met = {request: meeting(*request) for request in STEP_REQUESTS}
    assert all(len(names) <= 1 for names in met.values()), met
    assert met[("batch", "jobs", "CREATE")] == met[("", "pods", "UPDATE")] == ["towline-step-objects"]


BAD_VALUES = [
    ({"operator.replicas": "two"}, "replicas"),
    ({"operator.replicas": "0"}, "replicas"),
    ({"operator.logLevel": "verbose"}, "logLevel"),
    ({"operator.metricsPort": "70000"}, "metricsPort"),
    ({"image.pullPolicy": "Sometimes"}, "pullPolicy"),
    ({"image.tag": "has space"}, "tag"),
    ({"image.digest": "sha256:abc"}, "digest"),
    ({"runner.digest": "md5:" + "0" * 32}, "digest"),
    ({"watchNamespaces": '["Team_A"]'}, "watchNamespaces"),
    ({"watchNamespaces": '"team-a"'}, "watchNamespaces"),
    ({"networkPolicy.apiServer.cidrs": '["the-api-server"]'}, "cidrs"),
    ({"runner.runAsUser": "0"}, "runAsUser"),
    ({"operator.replica": "2"}, "replica"),
    ({"serviceMonitor.interval": "often"}, "interval"),
    ({"egress.podCIDRs": '["10.244.0.0"]'}, "podCIDRs"),
    ({"egress.requireIsolation": "maybe"}, "requireIsolation"),
    ({"ingress.replicas": "0"}, "replicas"),
    ({"networkPolicy.enabled": "yes"}, "enabled"),
    ({"workflowSecretChecks": "0"}, "workflowSecretChecks"),
    ({"operator.leaderElection.renewDeadlineSeconds": "soon"}, "renewDeadlineSeconds"),
    ({"operator.reconcileMaxRetries": "0"}, "reconcileMaxRetries"),
    ({"trustedTriggerRunCreators": '[{"serviceAccount": "no-namespace"}]'}, "trustedTriggerRunCreators"),
    ({"stepPodCreators": '[""]'}, "stepPodCreators"),
    ({"stepJobs.images": '[""]'}, "images"),
    ({"stepJobs.imgs": '["x"]'}, "imgs"),
    ({"codeSteps.enabled": "yes"}, "enabled"),
    ({"codeSteps.namespaces": '["Team_A"]'}, "namespaces"),
    ({"codeSteps.namespace": '["a"]'}, "namespace"),
    ({"archive.enabled": "yes"}, "enabled"),
    ({"archive.retentionDays": "-1"}, "retentionDays"),
    ({"archive.logCapBytes": "10"}, "logCapBytes"),
    ({"archive.maxRunsAwaiting": "-1"}, "maxRunsAwaiting"),
    ({"archive.database.urlSecret.nmae": "db"}, "nmae"),
    # A misspelt key inside each top-level object, a wrong type for each top-level list or number.
    ({"image.repo": "r.example/towline"}, "repo"),
    ({"global.imagePullSecret": '[{"name": "regcred"}]'}, "imagePullSecret"),
    ({"commonLabels": '{"team": 1}'}, "commonLabels"),
    ({"podLabels": '{"bad key": "x"}'}, "bad key"),
    ({"imagePullSecrets": '"regcred"'}, "imagePullSecrets"),
    ({"imagePullSecrets": '[{"secret": "regcred"}]'}, "secret"),
    ({"runner.imag": "r.example/runner:1"}, "imag"),
    ({"stepPods.nodeSelecter": '{"pool": "steps"}'}, "nodeSelecter"),
    ({"stepPods.imagePullSecrets": '["regcred"]'}, "imagePullSecrets"),
    ({"stepPods.tolerations": '[{"key": "a", "operater": "Exists"}]'}, "operater"),
    ({"operator.logFormat": "yaml"}, "logFormat"),
    ({"operator.extraEnv": '[{"name": "A", "valu": "b"}]'}, "valu"),
    ({"operator.topologySpreadConstraints": '[{"maxSkew": 1}]'}, "topologyKey"),
    ({"operator.resources.request": '{"cpu": "1"}'}, "request"),
    ({"serviceAccount.nmae": "towline"}, "nmae"),
    ({"rbac.aggregateToDefaultRole": "true"}, "aggregateToDefaultRole"),
    ({"ingress.expose.ingress.enabled": "true"}, "host"),
    ({"ingress.expose.ingress.host": "Hooks_Example"}, "host"),
    ({"ingress.expose.httpRoute.enabled": "true"}, "parentRefs"),
    ({"rbac.aggregateToDefaultRoles": "yes"}, "aggregateToDefaultRoles"),
    ({"trustedRunCreators": '"ci-bot"'}, "trustedRunCreators"),
    ({"trustedTriggerRunCreators": '[{"users": "ci-bot"}]'}, "trustedTriggerRunCreators"),
    ({"admissionPolicies.enabeld": "false"}, "enabeld"),
    ({"stepPodCreators": '"system:serviceaccount:x:y"'}, "stepPodCreators"),
    ({"stepTypes.requireDigests": "true"}, "requireDigests"),
    ({"networkPolicy.apiServr.cidrs": '["10.0.0.1/32"]'}, "apiServr"),
    ({"ingress.replcas": "3"}, "replcas"),
    ({"ingress.service.typ": "NodePort"}, "typ"),
    ({"ingress.serviceAccount.nmae": "webhooks"}, "nmae"),
    ({"ingress.logFormat": "yaml"}, "logFormat"),
    ({"ingress.priorityClassName": "High Priority"}, "priorityClassName"),
    ({"serviceMonitor.intervall": "1m"}, "intervall"),
    ({"prometheusRule.enabeld": "true"}, "enabeld"),
    ({"prometheusRule.enabled": "yes"}, "enabled"),
    ({"grafanaDashboard.label": '{"grafana_dashboard": "1"}'}, "label"),
    ({"grafanaDashboard.labels": '{"grafana_dashboard": 1}'}, "grafana_dashboard"),
    ({"tests.enabeld": "false"}, "enabeld"),
    ({"tests.resources.request": '{"cpu": "1"}'}, "request"),
    ({"egress.podCidrs": '["10.244.0.0/16"]'}, "podCidrs"),
    ({"trustedWorkflowAuthors.usres": '["ci"]'}, "usres"),
    ({"workflowSecretChecks": '"many"'}, "workflowSecretChecks"),
    ({"fullnameOverride": "Team_A"}, "fullnameOverride"),
    ({"nameOverride": "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"}, "nameOverride"),
    ({"crds.enabled": "sometimes"}, "enabled"),
    ({"crds.kep": "true"}, "kep"),
    ({"tracing.queueSize": "lots"}, "queueSize"),
    ({"tracing.endpiont": "http://collector:4318"}, "endpiont"),
    ({"events.sink.urll": "https://events.example.com"}, "urll"),
    ({"events.sink.maxAttempts": "50"}, "maxAttempts"),
    ({"events.sink.types": '["dev.towline.build.*"]'}, "types"),
    ({"ui.enabeld": "true"}, "enabeld"),
    ({"ui.session.idleMinutes": "forever"}, "idleMinutes"),
    ({"ui.editor.allowApply": '"yes"'}, "allowApply"),
]


@pytest.mark.parametrize(("values", "named"), BAD_VALUES)
def test_bad_values_fail_naming_the_value(k8s_binaries: BinarySet, values: dict[str, str], named: str) -> None:
    result = template(k8s_binaries, values)
    assert result.returncode != 0, f"{values} rendered:\n{result.stdout[:400]}"
    assert "schema" in result.stderr and named in result.stderr, result.stderr


def test_every_top_level_value_has_a_bad_value_case() -> None:
    top_level = set(yaml.safe_load((CHART / "values.yaml").read_text()))
    covered = {key.split(".")[0] for values, _ in BAD_VALUES for key in values}
    assert top_level - covered == set()


def test_step_pod_creators_add_to_the_job_controller_in_the_step_objects_policy(k8s_binaries: BinarySet) -> None:
    def pod_creators(values: dict[str, str]) -> str:
        policy = find(render(k8s_binaries, values), "ValidatingAdmissionPolicy", "towline-step-objects")
        return str(next(v["expression"] for v in policy["spec"]["variables"] if v["name"] == "creators"))

    default = pod_creators({})
    assert '"system:serviceaccount:kube-system:job-controller", "system:kube-controller-manager"]' in default
    extra = pod_creators({"stepPodCreators": '["system:serviceaccount:kube-system:my-job-controller"]'})
    assert ('"system:kube-controller-manager", "system:serviceaccount:kube-system:my-job-controller"]' in extra), extra


def test_service_monitor_is_off_by_default_and_explains_a_missing_crd(k8s_binaries: BinarySet) -> None:
    assert not [d for d in render(k8s_binaries) if d["kind"] == "ServiceMonitor"]
    result = template(k8s_binaries, {"serviceMonitor.enabled": "true"})
    assert result.returncode != 0 and "Prometheus Operator's CRDs" in result.stderr, result.stderr
    documents = render(k8s_binaries, {"serviceMonitor.enabled": "true"},
                       "--api-versions", "monitoring.coreos.com/v1/ServiceMonitor")
    monitor = find(documents, "ServiceMonitor", "towline-operator")
    service = find(documents, "Service", "towline-operator")
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert [e["port"] for e in monitor["spec"]["endpoints"]] == ["metrics"]


def test_no_default_credentials(k8s_binaries: BinarySet) -> None:
    values = {"ingress.enabled": "true"}
    extra = ("--api-versions", "monitoring.coreos.com/v1/ServiceMonitor", "--set", "serviceMonitor.enabled=true")
    documents, again = render(k8s_binaries, values, *extra), render(k8s_binaries, values, *extra)
    # The only Secrets are the archive's keys, made at install (each render makes new ones): nothing shipped.
    secrets = {d["metadata"]["name"]: d["data"] for d in documents if d["kind"] == "Secret"}
    assert set(secrets) == {"towline-archive-signing-key", "towline-archive-api-tls"}, set(secrets)
    made_again = {d["metadata"]["name"]: d["data"] for d in again if d["kind"] == "Secret"}
    for name, data in secrets.items():
        assert all(data[key] != made_again[name][key] for key in data), name
    for container in find(documents, "Deployment", "towline-operator")["spec"]["template"]["spec"]["containers"]:
        for variable in container["env"]:
            if variable["name"] == "TOWLINE_STEP_IMAGE_PULL_SECRETS":
                continue  # names of Secrets for the kubelet, never their values
            assert not any(word in variable["name"] for word in ("PASSWORD", "TOKEN", "SECRET", "KEY")), variable


def test_every_object_carries_the_release_labels(k8s_binaries: BinarySet) -> None:
    # `helm uninstall` is checked by these labels: an object without them could be left unseen.
    documents = render(k8s_binaries, {"ingress.enabled": "true", "watchNamespaces": '["team-a"]'})
    for document in documents:
        labels = document["metadata"].get("labels") or {}
        assert labels.get("app.kubernetes.io/instance") == "towline", (document["kind"], document["metadata"])
        assert labels.get("app.kubernetes.io/name") == "towline", (document["kind"], document["metadata"])
        assert labels.get("helm.sh/chart", "").startswith("towline-"), (document["kind"], document["metadata"])


def _operator_pod(documents: list[dict[str, Any]]) -> dict[str, Any]:
    pod: dict[str, Any] = find(documents, "Deployment", "towline-operator")["spec"]["template"]
    return pod


def test_operator_deployment_is_hardened_with_probes(k8s_binaries: BinarySet) -> None:
    documents = render(k8s_binaries)
    deployment = find(documents, "Deployment", "towline-operator")
    assert deployment["spec"]["replicas"] == 2
    pod = _operator_pod(documents)["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    (container,) = pod["containers"]
    security = container["securityContext"]
    assert security["readOnlyRootFilesystem"] is True and security["allowPrivilegeEscalation"] is False
    assert security["capabilities"] == {"drop": ["ALL"]}
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    env = {v["name"]: v.get("value") for v in container["env"]}
    assert env["TOWLINE_HEALTH_PORT"] == str(ports["health"]) and env["TOWLINE_METRICS_PORT"] == str(ports["metrics"])
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        assert container[probe]["httpGet"] == {"path": "/healthz", "port": "health"}, probe


@pytest.mark.parametrize(("values", "expected"), [({}, "true"), ({"egress.requireIsolation": "false"}, "false")])
def test_require_isolation_reaches_the_operator(k8s_binaries: BinarySet, values: dict[str, str], expected: str) -> None:
    (container,) = _operator_pod(render(k8s_binaries, values))["spec"]["containers"]
    env = {v["name"]: v.get("value") for v in container["env"]}
    assert env["TOWLINE_REQUIRE_ISOLATION"] == expected


def test_disruption_budgets_select_the_pods_they_protect(k8s_binaries: BinarySet) -> None:
    documents = render(k8s_binaries, {"ingress.enabled": "true"})
    operator_budget = find(documents, "PodDisruptionBudget", "towline-operator")
    assert operator_budget["spec"] == {"maxUnavailable": 1, "selector": {"matchLabels": OPERATOR_POD_LABELS}}
    assert OPERATOR_POD_LABELS.items() <= _operator_pod(documents)["metadata"]["labels"].items()
    ingress_budget = find(documents, "PodDisruptionBudget", "towline-ingress")
    assert ingress_budget["spec"]["selector"] == {"matchLabels": INGRESS_POD_LABELS}
    # One replica cannot have a budget that forbids every drain; without the ingress, no ingress budget.
    single = render(k8s_binaries, {"operator.replicas": "1", "ingress.enabled": "false"})
    assert not [d for d in single if d["kind"] == "PodDisruptionBudget"]


def test_operator_network_policy_allows_only_api_server_dns_and_its_own_ports(k8s_binaries: BinarySet) -> None:
    documents = render(k8s_binaries, {"networkPolicy.apiServer.cidrs": '["10.0.0.1/32"]',
                                      "networkPolicy.apiServer.ports": "[6443]"})
    policy = find(documents, "NetworkPolicy", "towline-operator")["spec"]
    assert policy["podSelector"] == {"matchLabels": OPERATOR_POD_LABELS}
    assert sorted(policy["policyTypes"]) == ["Egress", "Ingress"]
    assert [rule["ports"] for rule in policy["ingress"]] == [[{"protocol": "TCP", "port": "metrics"}],
                                                            [{"protocol": "TCP", "port": "health"}]]
    api_server, dns = policy["egress"]
    assert api_server == {"to": [{"ipBlock": {"cidr": "10.0.0.1/32"}}], "ports": [{"protocol": "TCP", "port": 6443}]}
    assert dns["to"] == [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
                          "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}}}]
    assert {p["port"] for p in dns["ports"]} == {53}


def test_ingress_network_policy_only_when_the_ingress_is_enabled(k8s_binaries: BinarySet) -> None:
    assert not [d for d in render(k8s_binaries, {"ingress.enabled": "false"})
                if d["metadata"]["name"] == "towline-ingress" and d["kind"] in {"NetworkPolicy", "PodDisruptionBudget"}]
    policy = find(render(k8s_binaries, {"ingress.enabled": "true", "ingress.port": "8443"}),
                  "NetworkPolicy", "towline-ingress")["spec"]
    assert policy["podSelector"] == {"matchLabels": INGRESS_POD_LABELS}
    assert policy["ingress"] == [{"ports": [{"protocol": "TCP", "port": 8443}]},
                                 {"ports": [{"protocol": "TCP", "port": 9090}]}]
    assert [rule["ports"][0]["port"] for rule in policy["egress"]] == [443, 53]


def test_watch_namespaces_replaces_the_cluster_role_by_roles_in_each(k8s_binaries: BinarySet) -> None:
    documents = render(k8s_binaries, {"watchNamespaces": '["team-a","team-b"]'})
    cluster_wide = {d["metadata"]["name"] for d in documents if d["kind"] in {"ClusterRole", "ClusterRoleBinding"}}
    assert "towline-operator" not in cluster_wide
    discovery = find(documents, "ClusterRole", "towline-operator-discovery")
    assert [r["resources"] for r in discovery["rules"]] == [["customresourcedefinitions"]]
    assert all(set(r["verbs"]) <= {"get", "list", "watch"} for r in discovery["rules"])
    cluster_role = find(render(k8s_binaries), "ClusterRole", "towline-operator")
    for namespace in ("team-a", "team-b"):
        role = find(documents, "Role", "towline-operator", namespace)
        # The same rules as cluster-wide, less kopf's namespace listing.
        assert role["rules"] == [r for r in cluster_role["rules"] if r["resources"] != ["namespaces"]]
        binding = find(documents, "RoleBinding", "towline-operator", namespace)
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "towline-operator",
                                        "namespace": "towline-system"}]
    env = {v["name"]: v.get("value") for v in _operator_pod(documents)["spec"]["containers"][0]["env"]}
    assert env["TOWLINE_WATCH_NAMESPACES"] == "team-a,team-b"


def test_the_archive_may_patch_jobs_only_where_the_release_watches_and_gets_the_runners_job_ttl(
    k8s_binaries: BinarySet,
) -> None:
    values = {"archive.enabled": "true", "runner.jobTTLSecondsAfterFinished": "600", "archive.maxRunsAwaiting": "7"}
    watched = render(k8s_binaries, {**values, "watchNamespaces": '["team-a","team-b"]'})
    job_rules = [r for r in find(watched, "Role", "towline-archive", "team-a")["rules"] if r["resources"] == ["jobs"]]
    assert job_rules == [{"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["patch"]}]
    assert not [d for d in watched if d["kind"] == "ClusterRole" and any(
        "jobs" in r.get("resources", ()) for r in d.get("rules") or ()) and "archive" in d["metadata"]["name"]]
    documents = render(k8s_binaries, values)
    archive = find(documents, "Deployment", "towline-archive")["spec"]["template"]["spec"]["containers"][0]
    assert {v["name"]: v.get("value") for v in archive["env"]}["TOWLINE_JOB_TTL_SECONDS"] == "600"
    operator = {v["name"]: v.get("value") for v in _operator_pod(documents)["spec"]["containers"][0]["env"]}
    assert (operator["TOWLINE_ARCHIVE"], operator["TOWLINE_ARCHIVE_MAX_RUNS_AWAITING"]) == ("true", "7")
    # The archive's rule is one of towline-step-objects' (its Job requests, the status too, meet it).
    def archive_rule(documents: list[dict[str, Any]]) -> tuple[str, list[str]]:
        spec = find(documents, "ValidatingAdmissionPolicy", "towline-step-objects")["spec"]
        archive = next(v["expression"] for v in spec["variables"] if v["name"] == "archive")
        return archive.strip(), spec["matchConstraints"]["resourceRules"][0]["resources"]

    archive_user = "system:serviceaccount:towline-system:towline-archive"
    assert archive_rule(documents) == (
        f"request.userInfo.username == \"{archive_user}\" && request.resource.resource == 'jobs'",
        ["jobs", "jobs/status"])
    assert find(documents, "ValidatingAdmissionPolicyBinding", "towline-step-objects")["spec"]["validationActions"] == [
        "Deny"]
    assert archive_rule(render(k8s_binaries, {"archive.enabled": "false"})) == ("false", ["jobs"])


def test_config_checksum_changes_with_operator_values_only(k8s_binaries: BinarySet) -> None:
    def checksum(values: dict[str, str]) -> str:
        annotations = _operator_pod(render(k8s_binaries, values))["metadata"]["annotations"]
        return str(annotations["towline.dev/config-checksum"])

    base = checksum({})
    assert checksum({"operator.logLevel": "debug"}) != base
    assert checksum({"runner.image": "registry.example/runner:2"}) != base
    assert checksum({"trustedRunCreators": json.dumps(["ci-bot"])}) == base


def test_helm_test_hook_checks_the_operator_service(k8s_binaries: BinarySet) -> None:
    documents = render(k8s_binaries)
    test_pod = find(documents, "Pod", "towline-test-operator")
    assert test_pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    assert test_pod["spec"]["automountServiceAccountToken"] is False
    script = test_pod["spec"]["containers"][0]["command"][-1]
    assert "towline-operator.towline-system.svc" in script and "/healthz" in script and "/metrics" in script


def test_ingress_runs_as_the_service_account_the_values_name(k8s_binaries: BinarySet) -> None:
    documents = render(k8s_binaries, {"ingress.serviceAccount.name": "webhooks"})
    assert find(documents, "ServiceAccount", "webhooks")["metadata"]["name"] == "webhooks"
    binding = next(d for d in documents if d["kind"] == "ClusterRoleBinding"
                   and d["subjects"][0]["name"] == "webhooks")
    role = find(documents, "ClusterRole", binding["roleRef"]["name"])
    pod = find(documents, "Deployment", "towline-ingress")["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "webhooks"
    assert pod["containers"][0]["command"] == ["towline", "ingress"]
    resources = {r for rule in role["rules"] for r in rule["resources"]}
    # configmaps: its dead letters (towline-dead-letters; the towline-ingress-dead-letters policy refuses any other).
    assert resources == {"workflows", "workflowruns", "configmaps"}
    assert find(documents, "Service", "towline-ingress")["spec"]["ports"][0]["targetPort"] == "http"


def _pod_specs(documents: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The pod specs of the release's own pods: the operator, the ingress and the `helm test` pod."""
    return {"operator": _operator_pod(documents)["spec"],
            "ingress": find(documents, "Deployment", "towline-ingress")["spec"]["template"]["spec"],
            "tests": find(documents, "Pod", "towline-test-operator")["spec"]}


def _env(pod: dict[str, Any]) -> dict[str, Any]:
    return {v["name"]: v.get("value") for v in pod["containers"][0]["env"]}


def test_image_pull_secrets_reach_every_pod_and_the_step_pods(k8s_binaries: BinarySet) -> None:
    documents = render(k8s_binaries, {"imagePullSecrets": '[{"name": "regcred"}]'})
    for component, pod in _pod_specs(documents).items():
        assert pod["imagePullSecrets"] == [{"name": "regcred"}], component
    assert _env(_pod_specs(documents)["operator"])["TOWLINE_STEP_IMAGE_PULL_SECRETS"] == "regcred"
    assert not [pod for pod in _pod_specs(render(k8s_binaries)).values() if "imagePullSecrets" in pod]


def test_step_pods_pull_secrets_replace_the_top_level_ones_for_steps_only(k8s_binaries: BinarySet) -> None:
    documents = render(k8s_binaries, {"imagePullSecrets": '[{"name": "regcred"}]',
                                      "stepPods.imagePullSecrets": '[{"name": "steps-a"}, {"name": "steps-b"}]'})
    pods = _pod_specs(documents)
    assert _env(pods["operator"])["TOWLINE_STEP_IMAGE_PULL_SECRETS"] == "steps-a,steps-b"
    assert pods["operator"]["imagePullSecrets"] == [{"name": "regcred"}]


def test_step_pod_values_reach_the_operator_which_reads_them(k8s_binaries: BinarySet) -> None:
    toleration = {"key": "dedicated", "operator": "Equal", "value": "steps", "effect": "NoSchedule"}
    documents = render(k8s_binaries, {"stepPods.imagePullSecrets": '[{"name": "steps-creds"}]',
                                      "stepPods.nodeSelector": '{"towline.dev/steps": "true"}',
                                      "stepPods.tolerations": json.dumps([toleration])})
    env = _env(_pod_specs(documents)["operator"])
    # The operator's own reader of its environment: what the chart writes is what it accepts.
    settings = OperatorConfig.from_environment({**env, "KUBERNETES_SERVICE_HOST": "10.96.0.1",
                                                "KUBERNETES_SERVICE_PORT": "443"}).pod_settings
    assert settings.image_pull_secrets == ("steps-creds",)
    assert dict(settings.node_selector) == {"towline.dev/steps": "true"}
    assert settings.tolerations == (toleration,)
    defaults = _env(_pod_specs(render(k8s_binaries))["operator"])
    assert (defaults["TOWLINE_STEP_NODE_SELECTOR"], defaults["TOWLINE_STEP_TOLERATIONS"]) == ("{}", "[]")


@pytest.mark.parametrize("component", ["operator", "ingress", "tests"])
def test_scheduling_values_reach_the_pod(k8s_binaries: BinarySet, component: str) -> None:
    toleration = {"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["ops"]}]}]}}}
    spread = {"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "ScheduleAnyway",
              "labelSelector": {"matchLabels": {"app.kubernetes.io/name": "towline"}}}
    resources = {"requests": {"cpu": "20m", "memory": "40Mi"}, "limits": {"memory": "80Mi"}}
    documents = render(k8s_binaries, {
        f"{component}.nodeSelector": '{"pool": "ops"}',
        f"{component}.tolerations": json.dumps([toleration]),
        f"{component}.affinity": json.dumps(affinity),
        f"{component}.topologySpreadConstraints": json.dumps([spread]),
        f"{component}.priorityClassName": "towline-critical",
        f"{component}.podAnnotations": '{"team": "platform"}',
        f"{component}.resources": json.dumps(resources),
    })
    pod = _pod_specs(documents)[component]
    assert pod["nodeSelector"] == {"pool": "ops"}
    assert pod["tolerations"] == [toleration]
    assert pod["affinity"] == affinity
    assert pod["topologySpreadConstraints"] == [spread]
    assert pod["priorityClassName"] == "towline-critical"
    assert pod["containers"][0]["resources"] == resources
    metadata = {"operator": _operator_pod(documents)["metadata"],
                "ingress": find(documents, "Deployment", "towline-ingress")["spec"]["template"]["metadata"],
                "tests": find(documents, "Pod", "towline-test-operator")["metadata"]}[component]
    assert metadata["annotations"]["team"] == "platform"
    others = [name for name in ("operator", "ingress", "tests") if name != component]
    for name, other in _pod_specs(documents).items():
        if name in others:
            assert not {"nodeSelector", "tolerations", "topologySpreadConstraints", "priorityClassName"} & set(other)


def test_the_operators_own_affinity_spreads_replicas_unless_replaced(k8s_binaries: BinarySet) -> None:
    default = _operator_pod(render(k8s_binaries))["spec"]["affinity"]
    assert list(default) == ["podAntiAffinity"]
    replaced = {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 1, "preference": {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["ops"]}]}}]}}
    assert _operator_pod(render(k8s_binaries, {"operator.affinity": json.dumps(replaced)}))["spec"]["affinity"] == \
        replaced


def test_the_helm_test_hook_annotations_cannot_be_overridden(k8s_binaries: BinarySet) -> None:
    documents = render(k8s_binaries, {"tests.podAnnotations": '{"helm.sh/hook": "post-install", "team": "a"}'})
    annotations = find(documents, "Pod", "towline-test-operator")["metadata"]["annotations"]
    assert (annotations["helm.sh/hook"], annotations["team"]) == ("test", "a")


@pytest.mark.parametrize("component", ["operator", "ingress"])
def test_log_format_and_extra_env_reach_the_container(k8s_binaries: BinarySet, component: str) -> None:
    assert _env(_pod_specs(render(k8s_binaries))[component])["TOWLINE_LOG_FORMAT"] == "text"
    documents = render(k8s_binaries, {f"{component}.logFormat": "json",
                                      f"{component}.extraEnv": '[{"name": "HTTPS_PROXY", "value": "http://p:3128"}]'})
    env = _pod_specs(documents)[component]["containers"][0]["env"]
    assert {"name": "TOWLINE_LOG_FORMAT", "value": "json"} in env
    # After the chart's own variables: one of the same name overrides the chart's.
    assert env[-1] == {"name": "HTTPS_PROXY", "value": "http://p:3128"}


def test_services_monitors_and_deployments_carry_the_usual_labels(k8s_binaries: BinarySet) -> None:
    documents = render(k8s_binaries, {"serviceMonitor.enabled": "true"},
                       "--api-versions", "monitoring.coreos.com/v1/ServiceMonitor")
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    expected = {"app.kubernetes.io/name": "towline", "app.kubernetes.io/instance": "towline",
                "app.kubernetes.io/version": chart["appVersion"], "app.kubernetes.io/managed-by": "Helm",
                "helm.sh/chart": f"towline-{chart['version']}"}
    checked = [d for d in documents if d["kind"] in {"Service", "ServiceMonitor", "Deployment"}]
    # Operator, ingress and archive: their Services (the archive's API and metrics), monitors and Deployments.
    assert len(checked) == 11, [(d["kind"], d["metadata"]["name"]) for d in checked]
    monitored = {d["metadata"]["name"] for d in checked if d["kind"] == "ServiceMonitor"}
    assert monitored == {"towline-operator", "towline-ingress", "towline-archive"}, monitored
    for document in checked:
        labels = document["metadata"]["labels"]
        assert expected.items() <= labels.items(), (document["kind"], document["metadata"]["name"], labels)
    for document in (d for d in checked if d["kind"] == "Deployment"):
        component = document["spec"]["selector"]["matchLabels"]["app.kubernetes.io/component"]
        assert document["metadata"]["labels"]["app.kubernetes.io/component"] == component
        pod_labels = document["spec"]["template"]["metadata"]["labels"]
        assert pod_labels["app.kubernetes.io/instance"] == "towline", document["metadata"]["name"]
