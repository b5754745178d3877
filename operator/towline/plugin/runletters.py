"""Dead letters of kind `run`: runs that failed before their first step, listed from the runs themselves.

A run the operator refused to start (its Workflow missing or not valid, params it does not declare or of the wrong
type, a step type or subflow it cannot resolve, a trigger the Workflow does not have) is already an object in its
namespace, and the archive keeps it once the cluster prunes it. So a letter of kind `run` is no copy: it is a view
over the namespace's runs (live, then archived) that ended Failed with no step ever started, and it shows only what
the run object itself holds. Nothing is written anywhere to keep it, and no Secret is ever read for it.

Who sees it: whoever may list the namespace's runs (and, for the archived ones, the archive's runs). Who may
replay it: the same people as a refused delivery's, checked by the API server, not here: the replay is a run
created as the person who asks, annotated towline.dev/replayed-by (their own name) and towline.dev/replay-of
(workflowruns/NAME), which the chart's admission policy lets through only for a holder of the `replay` verb.

A replay is a new run of the same Workflow with the same params and trigger: a manual run stays manual, a webhook
run carries the same trigger name and data, and a schedule run becomes a manual run with its params (a slot is
the operator's to fire, never a person's). A subflow's child run is not a letter: its parent's step failed with it,
and retrying the parent starts a new child. Never imports the engine (the plugin's start stays light): the replay's
name comes from the caller.
"""

from __future__ import annotations

from dataclasses import dataclass

from towline.jsontypes import JSON
from towline.k8s import session
from towline.k8s.client import ApiError, KubeApi
from towline.k8s.deliveryletters import REPLAY_OF_ANNOTATION, REPLAYED_BY_ANNOTATION
from towline.k8s.labels import LABEL_TRIGGER, LABEL_WORKFLOW, identifier_label
from towline.k8s.runletters import REPLAY_OF_RUN, failed_before_first_step, replayed_run
from towline.lenient import as_mapping
from towline.plugin.history import runs_path
from towline.plugin.keptrecords import kept_run
from towline.plugin.views import RUN_KIND

RUN_LETTER_KIND = "run"
ARCHIVE_PAGE = "200"
"""Archived Failed runs read per listing: the newest first, enough for an admin's list."""
_UNAVAILABLE = (403, 404, 503)
"""The archive not served, not the caller's to read, or not ready: the live runs are listed alone."""


@dataclass
class RunLetter:
    """A run that failed before its first step, as its object holds it; `id` is the run's name."""

    namespace: str
    name: str
    uid: str
    workflow: str
    spec: JSON
    reason: str
    failed_at: str
    archived: bool = False
    replayed_by: str | None = None
    replay_run: str | None = None
    kind: str = RUN_LETTER_KIND

    @property
    def id(self) -> str:
        return self.name

    @property
    def trigger(self) -> JSON:
        return as_mapping(self.spec.get("trigger"))

    def document(self) -> JSON:
        trigger = self.trigger
        return {"id": self.id, "kind": self.kind, "namespace": self.namespace, "workflow": self.workflow,
                "run": self.name, "uid": self.uid, "trigger": trigger.get("name") or trigger.get("type") or "manual",
                "triggerType": trigger.get("type") or "manual", "reason": self.reason, "failedAt": self.failed_at,
                "params": as_mapping(self.spec.get("params")), "data": as_mapping(trigger.get("data")),
                "requestedBy": self.spec.get("requestedBy"), "archived": self.archived,
                "replayedBy": self.replayed_by, "replayRun": self.replay_run}


def run_letter(run: JSON, *, archived: bool = False) -> RunLetter | None:
    """The letter a run is, or None when it is not one."""
    if not failed_before_first_step(run):
        return None
    meta, spec, status = as_mapping(run.get("metadata")), as_mapping(run.get("spec")), as_mapping(run.get("status"))
    return RunLetter(
        namespace=str(meta.get("namespace") or ""), name=str(meta.get("name") or ""), uid=str(meta.get("uid") or ""),
        workflow=str(as_mapping(spec.get("workflowRef")).get("name") or ""), spec=spec,
        reason=str(status.get("message") or "the run failed before its first step"),
        failed_at=str(status.get("finishedAt") or meta.get("creationTimestamp") or ""), archived=archived)


def _replays(runs: list[JSON]) -> dict[tuple[str, str], tuple[str, str]]:
    """(namespace, replayed run) -> (who replayed it, the replay's name), from the replays' annotations."""
    found: dict[tuple[str, str], tuple[str, str]] = {}
    for run in runs:
        meta = as_mapping(run.get("metadata"))
        annotations = as_mapping(meta.get("annotations"))
        of = replayed_run(run)
        if of is not None and annotations.get(REPLAYED_BY_ANNOTATION):
            found[(str(meta.get("namespace") or ""), of)] = (str(annotations[REPLAYED_BY_ANNOTATION]),
                                                             str(meta.get("name") or ""))
    return found


async def archived_failed_runs(api: KubeApi, namespace: str | None) -> list[JSON]:
    """The archive's Failed runs as it recorded them (the run object itself); none where no archive answers."""
    try:
        answer = await api.request("GET", runs_path(namespace), query={"phase": "Failed", "limit": ARCHIVE_PAGE})
    except ApiError as error:
        if error.status in _UNAVAILABLE:
            return []
        raise
    items = answer.get("items")
    return [run for item in (items if isinstance(items, list) else []) if (run := kept_run(item))]


async def read_run_letters(api: KubeApi, namespace: str | None) -> list[RunLetter]:
    """The letters of one namespace (None: every namespace the caller may list runs in), live runs first and
    archived ones the cluster has pruned, oldest first; each says who replayed it, if anyone did."""
    live = await session.list_runs(api, namespace)
    letters = {letter.uid: letter for run in live if (letter := run_letter(run)) is not None}
    for run in await archived_failed_runs(api, namespace):
        letter = run_letter(run, archived=True)
        if letter is not None and letter.uid not in letters:
            letters[letter.uid] = letter
    replays = _replays(live)
    for letter in letters.values():
        letter.replayed_by, letter.replay_run = replays.get((letter.namespace, letter.name), (None, None))
    return sorted(letters.values(), key=lambda letter: (letter.failed_at, letter.name))


async def find_run_letter(api: KubeApi, namespace: str, name: str) -> RunLetter | JSON | None:
    """The letter named `name` in `namespace`; the run itself when it is no letter (the caller says why); None
    when there is no such run, live or archived."""
    run = await session.get_run(api, namespace, name)
    archived = False
    if run is None:
        try:
            answer = await api.request("GET", f"{runs_path(namespace)}/{name}")
        except ApiError as error:
            if error.status in _UNAVAILABLE:
                return None
            raise
        run, archived = kept_run(answer), True
        if not run:
            return None
    letter = run_letter(run, archived=archived)
    return run if letter is None else letter


def replay_manifest(letter: RunLetter, user: str, name: str, workflow_uid: str) -> JSON:
    """The replay's run: the same Workflow, params and trigger (a schedule run's as a manual run), requested by
    `user`, who names themself as its replayer (the admission policy checks both against the API server)."""
    trigger = letter.trigger
    kind = trigger.get("type") or "manual"
    spec: JSON = {"workflowRef": {"name": letter.workflow}, "params": as_mapping(letter.spec.get("params")),
                  "requestedBy": user}
    labels = {LABEL_WORKFLOW: letter.workflow}
    if kind == "webhook":
        spec["trigger"] = {"type": "webhook", "name": trigger.get("name"), "data": as_mapping(trigger.get("data"))}
        labels[LABEL_TRIGGER] = identifier_label(str(trigger.get("name") or ""))
    if letter.spec.get("retryOf"):
        spec["retryOf"] = letter.spec["retryOf"]
    return {
        **RUN_KIND,
        "metadata": {
            "name": name, "namespace": letter.namespace, "labels": labels,
            "annotations": {REPLAYED_BY_ANNOTATION: user, REPLAY_OF_ANNOTATION: f"{REPLAY_OF_RUN}{letter.name}"},
            "ownerReferences": [{"apiVersion": RUN_KIND["apiVersion"], "kind": "Workflow", "name": letter.workflow,
                                 "uid": workflow_uid}],
        },
        "spec": spec,
    }
