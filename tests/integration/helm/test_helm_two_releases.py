"""Two releases of the chart side by side on one cluster, as two teams run them: each from its own
namespace, each watching its own namespaces. Each team's run goes through an approval to Succeeded,
handled by its own release's operator; each release's admission policies still refuse a forged run
in its namespaces; a third release that would share their namespaces is refused; both uninstall to
nothing. Fixtures: conftest.py in this directory.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from tests.integration.helm.release import Cluster, install, kept_record, labelled_objects, on, uninstall
from tests.integration.support import bind_role, start_run, step_status, wait_for, wait_for_phase

from towline_dev.install import install_crds
from towline_dev.release import CHART, adopt_crds, api_server_egress, name_prefix, set_args, wait_rolled_out

pytestmark = pytest.mark.integration


@dataclass(frozen=True)
class Team:
    release: str
    namespace: str
    """Where the release is installed."""
    work: str
    """Its one watched namespace, where the team's workflows run."""

    @property
    def prefix(self) -> str:
        return name_prefix(self.release)


TEAMS = (Team("team-a", "team-a-system", "team-a-work"), Team("team-b", "team-b-system", "team-b-work"))
THIRD = ("team-c", "team-c-system")
"""A release the chart must refuse: (release, namespace)."""


@pytest.fixture
def two_releases(node_cluster: Cluster) -> Iterator[Cluster]:
    cluster = node_cluster
    egress = api_server_egress(cluster)
    # Neither team's release manages the CRDs (crds.enabled=false): the cluster must have them, held by release
    # `towline` as the session's are. An earlier test of this world may have removed them (the CRD upgrade tests
    # uninstall with crds.keep=false), and without them each release's ingress never gets Ready: its Workflow
    # watch is answered 404.
    install_crds(cluster)
    adopt_crds(cluster)
    try:
        for team in TEAMS:
            for namespace in (team.namespace, team.work):
                cluster.kubectl("create", "namespace", namespace, check=False)
            cluster.kubectl("label", "namespace", team.namespace, "--overwrite",
                            "pod-security.kubernetes.io/enforce=restricted")
            # The archive's read API is one per cluster: the first release serves it (docs/archive.md).
            # The CRDs are the cluster's, managed by one release (here the session's `towline`): neither team's.
            install(cluster, team.release, team.namespace, {
                **egress, "watchNamespaces": json.dumps([team.work]), "operator.replicas": "1", "crds.enabled": "false",
                "ingress.replicas": "1", "operator.logFormat": "json",
                "archive.api.enabled": "true" if team == TEAMS[0] else "false"})
        for team in TEAMS:
            wait_rolled_out(cluster, team.namespace, release=team.release)
        yield cluster
    finally:
        for release, namespace in [(team.release, team.namespace) for team in TEAMS] + [THIRD]:
            uninstall(cluster, release, namespace)
        for namespace in [name for team in TEAMS for name in (team.namespace, team.work)] + [THIRD[1]]:
            cluster.kubectl("delete", "namespace", namespace, "--ignore-not-found", "--wait=false", check=False)


def _workflow(namespace: str) -> dict[str, Any]:
    """An approval (created by the operator, decided by bob) before one step Job."""
    return {"apiVersion": "towline.dev/v1alpha1", "kind": "Workflow",
            "metadata": {"name": "ship", "namespace": namespace},
            "spec": {"steps": [
                {"id": "review", "approval": {"message": "Ship?", "approvers": {"users": ["bob"]}}},
                {"id": "ship", "needs": ["review"], "action": "data.transform",
                 "with": {"data": {"team": namespace}, "fields": {"shipped": "data.team"}}},
            ]}}


def _namespaces_in_log(cluster: Cluster, team: Team) -> set[str]:
    """The namespaces the release's operator logged work in (json lines carry a namespace field)."""
    text = cluster.kubectl("logs", f"deployment/{team.prefix}-operator", "-n", team.namespace).stdout
    found: set[str] = set()
    for line in text.splitlines():
        if line.startswith("{"):
            namespace = json.loads(line).get("namespace")
            if namespace:
                found.add(namespace)
    return found


def _forge_a_run(cluster: Cluster, namespace: str) -> str:
    """carol, a runner here, starts a run naming bob as its requester (four-eyes trusts it): stderr."""
    forged = {"apiVersion": "towline.dev/v1alpha1", "kind": "WorkflowRun",
              "metadata": {"name": "forged", "namespace": namespace},
              "spec": {"workflowRef": {"name": "ship"}, "requestedBy": "bob"}}
    result = cluster.kubectl("create", "-f", "-", stdin=json.dumps(forged), user="carol", check=False)
    assert result.returncode != 0, f"a forged run was admitted in {namespace}"
    return result.stderr


def _forge_a_step_job(cluster: Cluster, namespace: str) -> str:
    """alice, an editor here, creates (server-side dry run) a Job labelled for a run: stderr."""
    forged = {"apiVersion": "batch/v1", "kind": "Job",
              "metadata": {"name": "forged-step", "namespace": namespace, "labels": {"towline.dev/run": "ship"}},
              "spec": {"template": {"spec": {"restartPolicy": "Never",
                                             "containers": [{"name": "step", "image": "busybox"}]}}}}
    result = cluster.kubectl("create", "--dry-run=server", "-f", "-", stdin=json.dumps(forged), user="alice",
                             check=False)
    assert result.returncode != 0, f"a forged step Job was admitted in {namespace}"
    return result.stderr


def test_two_releases_run_their_own_namespaces_side_by_side(two_releases: Cluster) -> None:
    cluster = two_releases
    runs: dict[Team, str] = {}
    for team in TEAMS:
        # Each team binds its own release's roles: the names differ, the rules are the same.
        bind_role(cluster, team.work, f"{team.prefix}-runner", users=("carol",))
        bind_role(cluster, team.work, f"{team.prefix}-approver", users=("bob",))
        cluster.kubectl("apply", "-f", "-", stdin=json.dumps(_workflow(team.work)))
        runs[team] = start_run(cluster, team.work, "ship", user="carol")
    for team, run in runs.items():
        # The operator created the Approval: the other release's approval policy did not refuse it.
        waiting = wait_for_phase(cluster, team.work, run, {"AwaitingApproval"}, timeout=180)
        approval = step_status(waiting, "review")["approvalName"]
        decided = cluster.kubectl("patch", "approval", approval, "-n", team.work, "--type", "merge", "-p",
                                  json.dumps({"spec": {"decision": "Approved", "decidedBy": "bob"}}), user="bob")
        assert decided.returncode == 0
    for team, run in runs.items():
        done = wait_for_phase(cluster, team.work, run, {"Succeeded", "Failed"}, timeout=300)
        assert done["status"]["phase"] == "Succeeded", done["status"]
        assert step_status(done, "ship")["output"] == {"shipped": team.work}

    # Each run was handled by its own release's operator, and only by it.
    team_a, team_b = TEAMS
    assert team_a.work in _namespaces_in_log(cluster, team_a) - _namespaces_in_log(cluster, team_b)
    assert team_b.work in _namespaces_in_log(cluster, team_b) - _namespaces_in_log(cluster, team_a)

    # Each release's run-requester policy still refuses a forged requester in its own namespaces.
    for team in TEAMS:
        refused = _forge_a_run(cluster, team.work)
        assert f"{team.prefix}-run-requester" in refused, refused
        assert "spec.requestedBy must name who starts the run" in refused, refused

    # Each release's step-objects policy holds everyone but its own operator and archive to "hands off step
    # objects" in its watched namespaces: its binding applies everywhere and its rule names them, so the other
    # release's operator, whose step Jobs and pods above were admitted, never met it, and an editor here does.
    for team in TEAMS:
        bind_role(cluster, team.work, "edit", users=("alice",))
        refused = _forge_a_step_job(cluster, team.work)
        assert f"{team.prefix}-step-objects" in refused, refused
        assert "are created by the Towline operator only; alice may not create one" in refused, refused

    # The other release's identities get nowhere in a team's namespaces: its operator has no Role there,
    # and its ingress, which reads and creates runs cluster-wide, is not a trigger creator there.
    for team, other in ((team_a, team_b), (team_b, team_a)):
        operator = f"system:serviceaccount:{other.namespace}:towline-operator"
        answer = cluster.kubectl("auth", "can-i", "create", "approvals.towline.dev", "-n", team.work, "--as", operator,
                                 check=False)
        assert answer.stdout.strip() == "no", answer.stdout + answer.stderr
        ingress = f"system:serviceaccount:{other.namespace}:towline-ingress"
        hooked = {"apiVersion": "towline.dev/v1alpha1", "kind": "WorkflowRun",
                  "metadata": {"name": "hooked", "namespace": team.work},
                  "spec": {"workflowRef": {"name": "ship"}, "requestedBy": ingress,
                           "trigger": {"type": "webhook", "name": "deploy"}}}
        attempt = cluster.kubectl("create", "-f", "-", "--as", ingress, stdin=json.dumps(hooked), check=False)
        assert attempt.returncode != 0 and f"{team.prefix}-trigger-runs" in attempt.stderr, attempt.stderr

    # A third release that would run the same namespaces' workflows is refused before it creates anything.
    for values, expected in (({}, "a second release needs watchNamespaces of its own"),
                             ({"watchNamespaces": json.dumps([team_b.work, "team-c-work"])},
                              f"already runs workflows in {team_b.work}: two operators must not"),
                             ({"watchNamespaces": json.dumps(["team-c-work"])},
                              f'already served by release "{team_a.release}" in namespace "{team_a.namespace}"')):
        attempt = on(cluster, "install", THIRD[0], str(CHART), "--namespace", THIRD[1], "--create-namespace",
                     *set_args({"crds.enabled": "false", **values}))
        assert attempt.returncode != 0 and expected in attempt.stderr, attempt.stdout + attempt.stderr
        assert on(cluster, "status", THIRD[0], "-n", THIRD[1]).returncode != 0

    # Both uninstall to nothing of theirs (the shared CRDs are neither's).
    for team in TEAMS:
        uninstall(cluster, team.release, team.namespace)
    # but each archive's record (its volume and signing key: helm.sh/resource-policy keep).
    def left(team: Team) -> list[tuple[str, str]]:
        return [o for o in labelled_objects(cluster, f"app.kubernetes.io/instance={team.release}")
                if o not in kept_record(team.release, team.namespace)]

    wait_for("nothing of either release to be left", lambda: not any(left(team) for team in TEAMS), timeout=120)
