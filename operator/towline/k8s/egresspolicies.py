"""One egress NetworkPolicy for the steps of a run that may reach the same places.

A step's egress policy (`towline.k8s.objects.build_step_egress_policy`) follows from the step's declaration and
the operator's settings alone. Steps whose policies come out the same share one object: it is named and selects
pods by a digest of what it opens (`towline.dev/egress` on the policy and on the step's pod template), so equal
rules are one policy and unequal ones never select each other's pods. Each pod is still selected by exactly the
rules its own step declares; a 50-step fan-out makes one policy instead of 50, each a create the API server
admits, stores, watches and later collects (docs/benchmarks.md).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from towline.k8s.client import NETWORK_POLICIES, KubeApi
from towline.k8s.labels import LABEL_EGRESS, LABEL_RUN, LABEL_STEP
from towline.k8s.objects import RunRef

JSON = dict[str, Any]

KEEP_SECONDS = 300.0
"""How long a policy this operator made or found is taken to still exist without asking. One somebody deleted is
made again by the first step after that; until then the steps it would let out are held by the namespace's
default-deny policy alone: they fail closed, never open."""
MAX_KEPT = 10_000


def egress_group(policy: JSON) -> str:
    """The digest of what a step policy opens (its rules and the hosts the in-pod guard allows) and of the run that
    owns it: a run deleted and created again under its name never adopts the old one's policy, which the garbage
    collector is about to delete."""
    opened = {"spec": policy["spec"].get("egress") or [], "types": policy["spec"].get("policyTypes") or [],
              "annotations": policy["metadata"].get("annotations") or {},
              "owners": [owner.get("uid") for owner in policy["metadata"].get("ownerReferences") or []]}
    return hashlib.sha256(json.dumps(opened, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:20]


def shared_egress_policy(run: RunRef, policy: JSON) -> JSON:
    """`policy` as the one the run's steps of the same egress share: no step's name or label on it, its name and
    pod selector the run and the digest of its rules."""
    group = egress_group(policy)
    labels = {key: value for key, value in policy["metadata"]["labels"].items() if key != LABEL_STEP}
    metadata = {**policy["metadata"], "name": f"towline-egress-{run.name}-{group}",
                "labels": {**labels, LABEL_EGRESS: group}}
    spec = {**policy["spec"], "podSelector": {"matchLabels": {LABEL_RUN: run.name, LABEL_EGRESS: group}}}
    return {**policy, "metadata": metadata, "spec": spec}


def select_for_egress(job: JSON, policy: JSON) -> JSON:
    """`job` with its pod template labelled for the shared `policy` (the operator's admission policy holds the pod
    to the template, and nobody else may change a step pod's towline.dev/ labels)."""
    group = policy["metadata"]["labels"][LABEL_EGRESS]
    template = job["spec"]["template"]
    labels = {**(template.get("metadata") or {}).get("labels", {}), LABEL_EGRESS: group}
    template = {**template, "metadata": {**(template.get("metadata") or {}), "labels": labels}}
    return {**job, "spec": {**job["spec"], "template": template}}


@dataclass
class EgressPolicies:
    """The shared egress policies this operator made (or found made) lately: the steps that need one make it once
    between them, side by side in a fan-out too, instead of a create (or a 409 and a read) each."""

    clock: Callable[[], float] = time.monotonic
    _known: OrderedDict[tuple[str, str], tuple[asyncio.Future[None], float]] = field(default_factory=OrderedDict)

    async def ensure(self, api: KubeApi, policy: JSON) -> None:
        """The policy exists (made now, or already): after this, a pod it selects may start."""
        key = (policy["metadata"]["namespace"], policy["metadata"]["name"])
        known = self._known.get(key)
        now = self.clock()
        if known is None or (known[0].done() and now - known[1] > KEEP_SECONDS):
            known = (asyncio.ensure_future(self._make(api, policy)), now)
            self._known[key] = known
            self._known.move_to_end(key)  # a refreshed entry is the newest, not where it was first made
            while len(self._known) > MAX_KEPT:
                self._known.popitem(last=False)
        try:
            await asyncio.shield(known[0])
        except Exception:
            if self._known.get(key) is known:
                del self._known[key]  # the next step asks again
            raise

    @staticmethod
    async def _make(api: KubeApi, policy: JSON) -> None:
        await api.create(NETWORK_POLICIES.path(policy["metadata"]["namespace"]), policy)
