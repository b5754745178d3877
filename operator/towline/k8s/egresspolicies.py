"""One egress NetworkPolicy for the steps of a run that may reach the same places.

A step's egress rules (`towline.k8s.objects.egress_rules`) follow from the step's declaration and the operator's
settings alone. Steps whose policies come out the same share one object: it is named and selects
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
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from towline.jsontypes import JSON
from towline.k8s.client import NETWORK_POLICIES, KubeApi
from towline.k8s.labels import LABEL_EGRESS, LABEL_MANAGED_BY, LABEL_RUN, LABEL_WORKFLOW, MANAGER
from towline.k8s.objects import RunRef, allow_hosts_annotation, egress_policy

KEEP_SECONDS = 300.0
"""How long a policy this operator made or found is taken to still exist without asking. One somebody deleted is
made again by the first step after that; until then the steps it would let out are held by the namespace's
default-deny policy alone: they fail closed, never open."""
MAX_KEPT = 10_000


def build_shared_egress_policy(run: RunRef, rules: list[JSON], allow_hosts: Sequence[str]) -> JSON:
    """The policy the run's steps of these `rules` (towline.k8s.objects.egress_rules) share: no step's name or label
    on it, its name and pod selector the run and `egress_group` of what it opens; a step's pod template carries the
    group (towline.k8s.stepjobs.build_step_job's `egress_group`)."""
    group = egress_group(run, rules, allow_hosts)
    labels = {LABEL_WORKFLOW: run.workflow, LABEL_RUN: run.name, LABEL_MANAGED_BY: MANAGER, LABEL_EGRESS: group}
    return egress_policy(run, name=f"towline-egress-{run.name}-{group}", labels=labels,
                         pod_selector={LABEL_RUN: run.name, LABEL_EGRESS: group}, rules=rules, allow_hosts=allow_hosts)


def egress_group(run: RunRef, rules: list[JSON], allow_hosts: Sequence[str]) -> str:
    """The digest of what a step policy opens (its rules and the hosts the in-pod guard allows) and of the run that
    owns it: a run deleted and created again under its name never adopts the old one's policy, which the garbage
    collector is about to delete."""
    opened = {"spec": rules, "types": ["Egress"], "annotations": allow_hosts_annotation(allow_hosts),
              "owners": [run.uid]}
    return hashlib.sha256(json.dumps(opened, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:20]


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
