"""Replaying a dead letter of a namespace as the person who asks: one code for `kubectl towline deadletters replay
ID` and the web view's Replay button.

A letter is a refused delivery (towline.k8s.deliveryletters) or a run that failed before its first step
(towline.plugin.runletters). Either way the replay is one new run the person creates themself, annotated
towline.dev/replayed-by (their name as the API server gives it) and towline.dev/replay-of, and named from the letter,
so a second replay meets the first's run (409) and is refused naming it. Nothing here decides who may replay: the API
server does (RBAC on the letters, the admission policy on the run), and its refusal reaches the person as it is.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from towline.jsontypes import JSON
from towline.k8s.client import WORKFLOW_RUNS, WORKFLOWS, ApiError, KubeApi
from towline.k8s.deliveryletters import (
    DELIVERY_LETTERS_CONFIG_MAP,
    REPLAY_OF_ANNOTATION,
    REPLAYED_BY_ANNOTATION,
    DeliveryLetter,
    find_delivery_letter,
    mark_replayed,
    read_delivery_letters,
)
from towline.k8s.identity import whoami
from towline.k8s.labels import LABEL_TRIGGER, LABEL_WORKFLOW, identifier_label
from towline.plugin.commands import NotFound
from towline.plugin.runletters import RunLetter, find_run_letter, read_run_letters, replay_manifest
from towline.plugin.views import RUN_KIND

FORBIDDEN = 403
_OBJECT_NAME = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")
"""An id that could name a run (every letter's id can): anything else is looked up nowhere."""


class ReplayRefused(Exception):  # noqa: N818 - says what the person sees
    """The letter cannot be replayed (replayed already, nothing kept to replay); the message says why and what to do."""


@dataclass(frozen=True)
class Replayed:
    letter: str
    namespace: str
    run: str
    user: str

    @property
    def message(self) -> str:
        return f"dead letter {self.letter} replayed by {self.user} as run {self.run} in {self.namespace}"


async def namespace_letters(api: KubeApi, namespace: str | None) -> tuple[list[DeliveryLetter], list[RunLetter]]:
    """The refused deliveries and the runs that failed before their first step, of one namespace or (None) of
    every namespace the caller may read them in, read as the caller."""
    return await read_delivery_letters(api, namespace), await read_run_letters(api, namespace)


async def replay_letter(api: KubeApi, namespace: str, letter_id: str) -> Replayed | None:
    """Replay the run letter or refused delivery `letter_id` of `namespace`; None when it names neither."""
    if not _OBJECT_NAME.fullmatch(letter_id):
        return None
    try:
        found = await find_run_letter(api, namespace, letter_id)
    except ApiError as error:
        if error.status != FORBIDDEN:
            raise
        found = None  # runs not theirs to read: an id of another kind may still be theirs (the store answers)
    if isinstance(found, RunLetter):
        return await replay_run(api, found)
    if found is not None:
        phase = (found.get("status") or {}).get("phase") or "Pending"
        raise ReplayRefused(f"run {letter_id} in {namespace} did not fail before its first step (phase {phase}): "
                            f"only such runs are dead letters; start it again with kubectl towline resubmit "
                            f"{letter_id} (or retry)")
    delivery = await find_delivery_letter(api, namespace, letter_id)
    return None if delivery is None else await replay_delivery(api, delivery)


async def _workflow(api: KubeApi, namespace: str, name: str, letter: str) -> JSON:
    workflow = await api.get(WORKFLOWS.path(namespace, name))
    if workflow is None:
        raise NotFound(f"Workflow {namespace}/{name} is gone; dead letter {letter} cannot be replayed")
    return workflow


async def _create(api: KubeApi, namespace: str, body: JSON, letter: str) -> tuple[str, str | None]:
    """Create the replay's run; (its name, None), or (its name, who replayed it earlier) when it exists already."""
    run, created = await api.create(WORKFLOW_RUNS.path(namespace), body)
    name = str(body["metadata"]["name"])
    if created:
        return name, None
    earlier = ((run.get("metadata") or {}).get("annotations") or {}).get(REPLAYED_BY_ANNOTATION, "someone")
    return name, str(earlier)


def _replay_name(namespace: str, workflow: str, trigger: str, identity: str) -> str:
    from towline.triggers.ingress.runname import webhook_run_name  # noqa: PLC0415 - the replay alone loads the engine

    return webhook_run_name(namespace, workflow, trigger, identity)


async def replay_run(api: KubeApi, letter: RunLetter) -> Replayed:
    """A new run of the failed run's Workflow, params and trigger, created as the person who asks (see
    towline.plugin.runletters); named from the failed run's uid, so a second replay finds the first's run."""
    if letter.replay_run:
        raise ReplayRefused(f"dead letter {letter.id} was replayed already by {letter.replayed_by}: run "
                            f"{letter.replay_run} in {letter.namespace}")
    workflow = await _workflow(api, letter.namespace, letter.workflow, letter.id)
    user = await whoami(api)
    name = _replay_name(letter.namespace, letter.workflow, "replay", f"run/{letter.uid or letter.name}")
    body = replay_manifest(letter, user, name, str(workflow["metadata"]["uid"]))
    name, earlier = await _create(api, letter.namespace, body, letter.id)
    if earlier is not None:
        raise ReplayRefused(f"dead letter {letter.id} was replayed already by {earlier}: run {name} in "
                            f"{letter.namespace}")
    return Replayed(letter.id, letter.namespace, name, user)


async def replay_delivery(api: KubeApi, letter: DeliveryLetter) -> Replayed:
    """One new run from a refused delivery's stored data, created as the person who asks (the API server checks
    they hold the replay verb and name themselves), named from the letter so a second replay finds the first's run;
    then the letter records who replayed it and the run."""
    where = f"{letter.namespace}/{letter.workflow}"
    if letter.replay_run:
        raise ReplayRefused(f"dead letter {letter.id} was replayed already by {letter.replayed_by}: run "
                            f"{letter.replay_run} in {letter.namespace}")
    if letter.data is None:
        raise ReplayRefused(f"dead letter {letter.id} ({letter.reason}) kept no data to start a run with (a body over "
                            "the size kept, or one the trigger's data mapping refused); ask the sender to deliver it "
                            "again")
    workflow = await _workflow(api, letter.namespace, letter.workflow, letter.id)
    triggers = (workflow.get("spec") or {}).get("triggers") or []
    declared = next((t for t in triggers if t.get("name") == letter.trigger), None)
    if declared is None:
        raise NotFound(f"Workflow {where} no longer has trigger {letter.trigger}; dead letter {letter.id} cannot be "
                       "replayed")
    user = await whoami(api)
    name = _replay_name(letter.namespace, letter.workflow, letter.trigger, f"replay/{letter.id}")
    body = {
        **RUN_KIND,
        "metadata": {
            "name": name, "namespace": letter.namespace,
            "labels": {LABEL_WORKFLOW: letter.workflow, LABEL_TRIGGER: identifier_label(letter.trigger)},
            "annotations": {REPLAYED_BY_ANNOTATION: user,
                            REPLAY_OF_ANNOTATION: f"{DELIVERY_LETTERS_CONFIG_MAP}/{letter.id}"},
            "ownerReferences": [{"apiVersion": RUN_KIND["apiVersion"], "kind": "Workflow", "name": letter.workflow,
                                 "uid": workflow["metadata"]["uid"]}],
        },
        "spec": {"workflowRef": {"name": letter.workflow}, "params": declared.get("params") or {},
                 "trigger": {"type": "webhook", "name": letter.trigger, "data": letter.data},
                 "requestedBy": user},
    }
    name, earlier = await _create(api, letter.namespace, body, letter.id)
    if earlier is not None:
        await mark_replayed(api, letter, earlier, name)
        raise ReplayRefused(f"dead letter {letter.id} was replayed already by {earlier}: run {name} in "
                            f"{letter.namespace}")
    await mark_replayed(api, letter, user, name)
    return Replayed(letter.id, letter.namespace, name, user)
