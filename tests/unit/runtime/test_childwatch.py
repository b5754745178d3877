"""The operator's own watches of step Jobs, pods, Approvals and default-deny policies feed the cache and wake
runs as kopf's handlers did: a Job wakes its run when its state changes or it goes, a pod only when its success
ends its Job's attempt first, an Approval on any change (a decision), a finished run's children are not kept, and
a default-deny policy a (re-)list no longer shows is no longer intact."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from tests.unit.runtime.test_cache import KEY, NS, RUN, RUN_UID, ended_pod, job, pod

from towline.k8s.actions import DefaultDenyPolicies
from towline.k8s.labels import LABEL_RUN, STEP_POD_FINALIZER
from towline.k8s.live import LISTED, SYNCED, watch_objects
from towline.k8s.objects import build_default_deny_policy
from towline.k8s.observe import build_observed
from towline.runtime.cache import ChildCache
from towline.runtime.childwatch import ChildEvents, watch_children

Key = tuple[str, str]


def events(finished: set[Key] | None = None) -> tuple[ChildEvents, list[Key]]:
    woken: list[Key] = []
    return ChildEvents(ChildCache(), DefaultDenyPolicies(), lambda key: key not in (finished or set()),
                       woken.append), woken


def test_a_job_wakes_its_run_when_it_appears_changes_state_or_goes() -> None:
    feed, woken = events()
    feed.apply("Job", "ADDED", job("release-build-1", version="10"))
    feed.apply("Job", "MODIFIED", job("release-build-1", version="11"))  # still active: no pass
    assert woken == [KEY]
    feed.apply("Job", "MODIFIED", job("release-build-1", version="12", complete=True))
    assert woken == [KEY, KEY]
    feed.apply("Job", "DELETED", job("release-build-1", version="13", complete=True))
    assert woken == [KEY, KEY, KEY]
    assert len(feed.children) == 0


def approval(decision: str | None = None, *, version: str = "20") -> dict[str, Any]:
    spec: dict[str, Any] = {"runName": RUN, "step": "review"}
    if decision:
        spec.update(decision=decision, decidedBy="bob")
    return {"kind": "Approval", "metadata": {"name": "release-review", "namespace": NS, "uid": "approval-uid",
                                             "resourceVersion": version, "labels": {LABEL_RUN: RUN}},
            "spec": spec}


def test_an_approval_wakes_its_run_when_it_appears_is_decided_or_goes() -> None:
    """A decision is what a waiting run waits for: its event must reach a pass (no pass would come before the
    approval's expiry otherwise)."""
    feed, woken = events()
    feed.apply("Approval", "ADDED", approval())
    assert woken == [KEY]
    feed.apply("Approval", "MODIFIED", approval("Approved", version="21"))
    assert woken == [KEY, KEY]
    _, _, approvals = feed.children.children(KEY)
    assert [a["spec"].get("decision") for a in approvals] == ["Approved"], "the pass reads the decision"
    feed.apply("Approval", "DELETED", approval("Approved", version="22"))
    assert woken == [KEY, KEY, KEY]
    assert len(feed.children) == 0


def test_a_pod_is_cached_for_its_result_and_wakes_nothing() -> None:
    feed, woken = events()
    feed.apply("Pod", "LISTED", pod("release-build-1", terminated=True))
    assert woken == []
    jobs, pods, approvals = feed.children.children(KEY)
    assert (len(jobs), len(pods), len(approvals)) == (0, 1, 0)
    feed.apply("Pod", "DELETED", pod("release-build-1", terminated=True))
    assert len(feed.children) == 0


def test_a_pods_success_wakes_its_run_once_before_the_jobs_complete() -> None:
    """The Job controller writes Complete seconds after the pod succeeded: the pod's end wakes the run, and the
    Job's Complete after it wakes nothing more (one pass per step, as before)."""
    feed, woken = events()
    feed.apply("Job", "ADDED", job("release-build-1", version="10"))
    assert woken == [KEY]
    feed.apply("Pod", "ADDED", ended_pod("release-build-1", "Succeeded"))
    assert woken == [KEY, KEY]
    feed.apply("Pod", "MODIFIED", ended_pod("release-build-1", "Succeeded"))  # its finalizer removed
    feed.apply("Job", "MODIFIED", job("release-build-1", version="11", complete=True))
    feed.apply("Pod", "DELETED", ended_pod("release-build-1", "Succeeded"))
    assert woken == [KEY, KEY]


def test_a_pods_success_seen_before_its_job_still_wakes_the_run() -> None:
    """kwok (or a fast step) ends the pod before the Job's first event, even before the create's answer: then
    neither the answer, nor the Job's events (it already looks ended) wake the run, so the pod's end must."""
    feed, woken = events()
    feed.apply("Pod", "ADDED", ended_pod("release-build-1", "Succeeded"))
    assert woken == [KEY]
    feed.children.learned("Job", job("release-build-1", version="10"))  # the create's answer
    feed.apply("Job", "ADDED", job("release-build-1", version="10"))
    feed.apply("Job", "MODIFIED", job("release-build-1", version="11", complete=True))
    assert woken == [KEY]


def test_a_pods_success_after_its_jobs_complete_wakes_nothing_more() -> None:
    """The streams are separate: the Job's Complete may come first; it woke the run, the pod adds nothing."""
    feed, woken = events()
    feed.apply("Job", "ADDED", job("release-build-1", version="10"))
    feed.apply("Job", "MODIFIED", job("release-build-1", version="11", complete=True))
    assert woken == [KEY, KEY]
    feed.apply("Pod", "ADDED", ended_pod("release-build-1", "Succeeded"))
    assert woken == [KEY, KEY]


def test_a_failed_pod_leaves_the_wake_to_its_jobs_failed_condition() -> None:
    feed, woken = events()
    feed.apply("Job", "ADDED", job("release-build-1", version="10"))
    feed.apply("Pod", "ADDED", ended_pod("release-build-1", "Failed", exit_code=1))
    assert woken == [KEY]


def test_a_finished_runs_children_are_not_kept_nor_woken() -> None:
    feed, woken = events(finished={KEY})
    feed.apply("Job", "MODIFIED", job("release-build-1", complete=True))
    feed.apply("Pod", "MODIFIED", pod("release-build-1", terminated=True))
    assert len(feed.children) == 0
    assert woken == []


def policy(namespace: str, version: str, *, opened: bool = False) -> dict[str, Any]:
    body = build_default_deny_policy(namespace)
    body["metadata"]["resourceVersion"] = version
    if opened:
        body["spec"]["egress"] = [{}]
    return body


def test_the_default_deny_record_follows_the_policy_stream() -> None:
    feed, woken = events()
    known = feed.default_deny
    assert known is not None
    feed.apply("NetworkPolicy", "ADDED", policy(NS, "5"))
    assert known.intact(NS)
    feed.apply("NetworkPolicy", "MODIFIED", policy(NS, "6", opened=True))
    assert not known.intact(NS)
    feed.apply("NetworkPolicy", "MODIFIED", policy(NS, "7"))
    assert known.intact(NS)
    feed.apply("NetworkPolicy", "DELETED", policy(NS, "8"))
    assert not known.intact(NS)
    assert woken == []


def test_a_relist_that_no_longer_shows_a_policy_clears_it_within_its_scope_only() -> None:
    feed, _ = events()
    known = feed.default_deny
    assert known is not None
    for namespace in ("team", "other"):
        feed.apply("NetworkPolicy", "LISTED", policy(namespace, "5"))
    feed.listed("NetworkPolicy", set(), "team")  # the watch of "team" listed again: its policy was deleted meanwhile
    assert not known.intact("team")
    assert known.intact("other")
    feed.listed("NetworkPolicy", {"team"}, None)  # a cluster-wide list showed only team's
    assert not known.intact("other")


class PagedApi:
    """A list answered in two pages; the watch after it is never reached by the test."""

    def __init__(self) -> None:
        self.queries: list[dict[str, str]] = []

    async def request(self, method: str, path: str, *, query: dict[str, str]) -> dict[str, Any]:
        self.queries.append(dict(query))
        if "continue" not in query:
            return {"metadata": {"resourceVersion": "40", "continue": "next"}, "items": [job("a")]}
        return {"metadata": {"resourceVersion": "40"}, "items": [job("b")]}


def test_a_paged_list_yields_every_page_before_the_watch_starts() -> None:
    api = PagedApi()

    async def first_list() -> list[tuple[str, str]]:
        seen: list[tuple[str, str]] = []
        stream = watch_objects(api, "/apis/batch/v1/jobs", label_selector="towline.dev/run", page_size=2)  # type: ignore[arg-type]
        async for event, body in stream:
            seen.append((event, (body.get("metadata") or {}).get("name", "")))
            if event == SYNCED:
                break
        await stream.aclose()
        return seen

    assert asyncio.run(first_list()) == [(LISTED, "a"), (LISTED, "b"), (SYNCED, "")]
    assert api.queries == [{"labelSelector": "towline.dev/run", "limit": "2"},
                           {"labelSelector": "towline.dev/run", "limit": "2", "continue": "next"}]


class RecordingApi:
    """Records where each stream lists; answers one Job per list, in the namespace the test says."""

    def __init__(self, namespace_of_items: str) -> None:
        self.paths: list[str] = []
        self.namespace = namespace_of_items

    async def request(self, method: str, path: str, *, query: dict[str, str]) -> dict[str, Any]:
        self.paths.append(path)
        item = job("a")
        item["metadata"]["namespace"] = self.namespace
        return {"metadata": {"resourceVersion": "40"}, "items": [item] if "/jobs" in path else []}


def run_briefly(api: RecordingApi, namespaces: tuple[str, ...], feed: ChildEvents) -> None:
    async def body() -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(watch_children(api, namespaces, feed), 0.3)  # type: ignore[arg-type]

    asyncio.run(body())


def test_kopf_style_patterns_share_one_cluster_wide_stream_filtered_to_them() -> None:
    """`--namespace 't-gw0-*'` (as each test worker's operator runs) cannot be a request path."""
    api, (feed, _) = RecordingApi("t-gw0-a1"), events()
    run_briefly(api, ("t-gw0-*", "ops"), feed)
    assert "/apis/batch/v1/jobs" in api.paths and "/apis/batch/v1/namespaces/ops/jobs" in api.paths
    assert "/apis/towline.dev/v1alpha1/approvals" in api.paths, "Approvals take the same cluster-wide stream"
    assert not any("*" in path for path in api.paths)
    assert len(feed.children) == 1, "a Job in a namespace the pattern matches is kept"

    elsewhere, (other, _) = RecordingApi("t-gw1-b2"), events()
    run_briefly(elsewhere, ("t-gw0-*",), other)
    assert len(other.children) == 0, "another worker's Job is not"


def test_a_failed_pod_of_a_job_the_operator_keeps_wakes_its_run() -> None:
    """Nobody else writes such a Job's failure (towline.k8s.steppods): the pod's end is the news, and the pass
    observes the attempt failed with the kubelet's reason."""
    feed, woken = events()
    feed.apply("Job", "ADDED", job("release-build-1", version="10", managed=True, started="2026-12-05T07:00:00Z"))
    failed = ended_pod("release-build-1", "Failed", exit_code=1)
    failed["status"]["reason"] = "DeadlineExceeded"
    feed.apply("Pod", "ADDED", failed)
    assert woken == [KEY, KEY]
    observed = build_observed(*feed.children.children(KEY), run_name=RUN, run_uid=RUN_UID)
    assert (observed.jobs[("build", 1)].state, observed.jobs[("build", 1)].reason) == ("failed", "DeadlineExceeded")


def test_the_operators_own_write_is_kept_until_the_watch_shows_it() -> None:
    """A Job's end written by the operator: the watch's events from before that write (older) do not undo it in the
    cache, its echo (or a re-list) takes over, and later events count again."""
    cache = ChildCache()
    cache.saw("Job", job("release-build-1", version="10", managed=True))
    cache.wrote("Job", job("release-build-1", version="12", managed=True, complete=True))
    cache.saw("Job", job("release-build-1", version="11", managed=True))  # from before the write
    (kept,), _, _ = cache.children(KEY)
    assert kept["metadata"]["resourceVersion"] == "12"
    cache.saw("Job", job("release-build-1", version="12", managed=True, complete=True))  # its echo
    cache.saw("Job", job("release-build-1", version="13", managed=True, complete=True))
    (kept,), _, _ = cache.children(KEY)
    assert kept["metadata"]["resourceVersion"] == "13"
    cache.wrote("Job", job("release-build-1", version="14", managed=True, complete=True))
    cache.saw("Job", job("release-build-1", version="15", managed=True, complete=True), listed=True)
    (kept,), _, _ = cache.children(KEY)
    assert kept["metadata"]["resourceVersion"] == "15", "a re-list shows the newest"


def test_a_finished_runs_pod_still_held_by_the_operator_is_kept_and_wakes_the_run() -> None:
    """Its run's pass removes the finalizer (towline.k8s.steppods); any other child of a finished run is dropped."""
    feed, woken = events(finished={KEY})
    held = ended_pod("release-build-1", "Failed")
    held["metadata"]["finalizers"] = [STEP_POD_FINALIZER]
    feed.apply("Pod", "ADDED", held)
    assert woken == [KEY]
    _, pods, _ = feed.children.children(KEY)
    assert [p["metadata"]["finalizers"] for p in pods] == [[STEP_POD_FINALIZER]]


def test_a_held_pod_outlives_the_forgetting_of_its_finished_run() -> None:
    """The pod's end woke the run before the watch showed the run finished (the echo of its last write): forgetting
    the run's children then must keep the pod its pass still has to let go, and only that."""
    feed, woken = events()
    feed.apply("Job", "ADDED", job("release-build-1", managed=True))
    feed.apply("Pod", "ADDED", ended_pod("release-deploy-1", "Succeeded"))  # let go already
    held = ended_pod("release-build-1", "Succeeded")
    held["metadata"]["finalizers"] = [STEP_POD_FINALIZER]
    feed.apply("Pod", "MODIFIED", held)
    assert woken and woken[-1] == KEY
    feed.children.forget_run(KEY)
    jobs, pods, approvals = feed.children.children(KEY)
    assert (jobs, approvals) == ([], [])
    assert [p["metadata"]["name"] for p in pods] == [held["metadata"]["name"]]


def test_deletions_are_remembered_and_wake_the_run_only_while_it_is_in_flight() -> None:
    """A late answer must not bring back a child the watch showed deleted while its run is in flight; once a run
    is gone (the garbage collector deletes its children after the run was forgotten) or finished, keeping their
    UIDs would keep them for good."""
    in_flight: set[Key] = {KEY}
    woken: list[Key] = []
    feed = ChildEvents(ChildCache(), DefaultDenyPolicies(), lambda key: True, woken.append, in_flight.__contains__)
    feed.apply("Job", "DELETED", job("release-build-1"))
    feed.children.learned("Job", job("release-build-1"))  # a list answered after the delete
    assert feed.children.children(KEY)[0] == []
    assert feed.children.remembered_deletions() == 1
    assert woken == [KEY], "a Job of a run in flight went: the run's pass must know"
    feed.children.forget_run(KEY)
    in_flight.clear()  # the run was deleted (its history limit); the garbage collector deletes its children
    feed.apply("Job", "DELETED", job("release-build-1"))
    feed.apply("Pod", "DELETED", ended_pod("release-build-1", "Succeeded"))
    assert feed.children.remembered_deletions() == 0
    assert woken == [KEY], "no pass for a run that is gone"


def test_a_finished_runs_held_pod_wakes_the_run_once_for_its_end() -> None:
    """The kubelet's last status writes arrive still held while the run's pass lets the pod go: no pass each. A pod
    the cache held while it ran (the answer to its create, kept past the run's end) wakes the run when it ends."""
    feed, woken = events(finished={KEY})
    running_pod = pod("release-notify-1", terminated=False)
    running_pod["metadata"]["finalizers"] = [STEP_POD_FINALIZER]
    feed.children.learned("Pod", running_pod)
    held = ended_pod("release-notify-1", "Failed")
    held["metadata"]["finalizers"] = [STEP_POD_FINALIZER]
    feed.apply("Pod", "MODIFIED", held)
    assert woken == [KEY]
    held["status"]["conditions"] = [{"type": "Ready", "status": "False"}]
    feed.apply("Pod", "MODIFIED", held)
    assert woken == [KEY]


def test_the_children_of_a_gone_run_being_deleted_wake_nothing() -> None:
    """The garbage collector marks a deleted run's pods deleted (a MODIFIED event each) after the run went; each
    woke the run for a pass that read it. A pod the operator still holds is still news."""
    woken: list[Key] = []
    feed = ChildEvents(ChildCache(), DefaultDenyPolicies(), lambda key: True, woken.append, lambda key: False)
    going = ended_pod("release-build-1", "Succeeded")
    going["metadata"]["deletionTimestamp"] = "2026-12-05T07:01:00Z"
    feed.apply("Pod", "MODIFIED", going)
    assert (woken, feed.children.children(KEY)[1]) == ([], [])
    going["metadata"]["finalizers"] = [STEP_POD_FINALIZER]
    feed.apply("Pod", "MODIFIED", going)
    assert woken == [KEY]
