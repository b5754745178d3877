"""One delivery, from verified bytes to exactly one WorkflowRun (or a refusal that creates nothing).

Order matters: what the headers alone can refuse (a missing or malformed
signature, a stale timestamp, a wrong bearer token) is refused before the
body is read (`prepare`); the signature is checked before anything the body
says is believed; only then is a caller told that the Workflow is suspended or invalid;
the rate limit counts only verified deliveries (so unsigned junk cannot use up
a trigger's budget), and the run's name comes from the delivery's signed
identity so a redelivery or a replay finds the run it already started.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from functools import lru_cache

from towline.api.common import API_VERSION
from towline.api.runterms import TRACEPARENT_ANNOTATION
from towline.api.webhooks import CloudEventTrigger
from towline.jsontypes import JSON
from towline.k8s.client import ApiError, KubeApi
from towline.k8s.labels import LABEL_MANAGED_BY, LABEL_TRIGGER, LABEL_WORKFLOW, MANAGER, identifier_label
from towline.k8s.runs import create_run
from towline.k8s.secrets import SecretKeyReader, SecretProblem
from towline.triggers.ingress.cloudevents import event_identity, matches, parse_event, signed_attributes
from towline.triggers.ingress.deadletters import DeadLetters
from towline.triggers.ingress.limits import RateLimiter
from towline.triggers.ingress.outcome import Refusal
from towline.triggers.ingress.payload import parse_body, passes_filter, trigger_data, visible_headers
from towline.triggers.ingress.providers import slack_challenge
from towline.triggers.ingress.runname import DeliveryIdentity, delivery_identity, webhook_run_name
from towline.triggers.ingress.tracing import DeliveryTracer
from towline.triggers.ingress.verify import BodyMac, SigningKeys, body_mac, decode_keys, precheck, verify_delivery
from towline.triggers.ingress.workflows import Target

log = logging.getLogger(__name__)



@dataclass(frozen=True)
class Accepted:
    """A run exists for this delivery: 202 when this request created it, 200 for a redelivery."""

    status: int
    run: str | None
    message: str
    challenge: str | None = None
    """Slack's URL verification challenge, echoed in the answer (no run starts)."""


@dataclass(frozen=True)
class Prepared:
    """A delivery whose headers passed every check that needs no body, ready for its body."""

    target: Target
    keys: SigningKeys
    headers: dict[str, str]
    mac: BodyMac | None


@lru_cache(maxsize=1024)
def _keys(scheme: str, secret: bytes | None, public_key: bytes | None) -> SigningKeys:
    return decode_keys(scheme, secret, public_key)


class DeliveryHandler:
    """Verifies, limits, maps and records deliveries for resolved targets."""

    def __init__(self, api: KubeApi, secrets: SecretKeyReader, requested_by: str,
                 tracer: DeliveryTracer | None = None, letters: DeadLetters | None = None) -> None:
        self._api = api
        self._letters = letters
        """Where refused, verified deliveries are kept (towline.triggers.ingress.deadletters)."""
        self._tracer = tracer
        """Set while traces are exported: each run a delivery starts continues the delivery's span."""
        self._secrets = secrets
        self._limiter = RateLimiter()
        self.requested_by = requested_by

    async def signing_keys(self, target: Target, *, now: float) -> SigningKeys | Refusal:
        verify = target.webhook.verify
        raw: dict[str, bytes | None] = {"secret": None, "public": None}
        for slot, ref in (("secret", verify.secret_ref), ("public", verify.public_key_ref)):
            if ref is None or verify.scheme == "none":
                continue
            value = await self._secrets.read(target.namespace, ref.name, ref.key, now=now)
            if isinstance(value, SecretProblem):
                log.warning("%s/%s trigger %s: signing key unavailable: %s",
                            target.namespace, target.workflow, target.trigger.name, value.message)
                return _key_unavailable()
            raw[slot] = value
        try:
            return _keys(verify.scheme, raw["secret"], raw["public"])
        except ValueError as error:
            log.warning("%s/%s trigger %s: signing key unusable: %s",
                        target.namespace, target.workflow, target.trigger.name, error)
            return _key_unavailable()

    async def prepare(self, target: Target, headers: dict[str, str], *, now: float) -> Prepared | Refusal:
        """The trigger's keys, and every check of the headers that can be made before the body is read."""
        keys = await self.signing_keys(target, now=now)
        if isinstance(keys, Refusal):
            return keys
        early = precheck(target.webhook.verify, keys, headers, now=now)
        if early is not None:
            return early
        mac = body_mac(target.webhook.verify, keys, headers, now=now)
        if mac is not None and target.cloud_event is not None:
            mac.update(signed_attributes(headers))  # binary mode: the ce- headers are signed before the body
        return Prepared(target, keys, headers, mac)

    async def handle(
        self, prepared: Prepared, media: str, raw: bytes, *, now: float, monotonic: float
    ) -> Accepted | Refusal:
        """The delivery's outcome; one refused after its signature checked (filtered, suspended, the API server
        busy past its retries) is kept as a dead letter too."""
        outcome = await self._handle(prepared, media, raw, now=now, monotonic=monotonic)
        reason = kept_reason(outcome)
        if reason is not None and self._letters is not None:
            await self._letters.keep(prepared.target, prepared.headers, media, raw, reason)
        return outcome

    async def too_large(self, target: Target, headers: dict[str, str], size: int | None) -> None:
        """A body over maxBodyBytes: kept (its size and headers) when the headers alone authenticated the sender."""
        if self._letters is not None:
            await self._letters.keep_too_large(target, headers, size)

    async def _handle(  # noqa: PLR0911 - one early answer per check, in the order they must run
        self, prepared: Prepared, media: str, raw: bytes, *, now: float, monotonic: float
    ) -> Accepted | Refusal:
        target, headers = prepared.target, prepared.headers
        signed = raw if target.cloud_event is None else signed_attributes(headers) + raw
        verified = verify_delivery(target.webhook.verify, prepared.keys, headers, signed, now=now, mac=prepared.mac)
        if isinstance(verified, Refusal):
            return verified
        if target.webhook.verify.scheme == "slack" and (challenge := slack_challenge(media, raw)) is not None:
            return Accepted(200, None, "Slack URL verification: challenge answered; no run started", challenge)
        if target.invalid is not None:
            return Refusal(409, "WorkflowInvalid", f"Workflow {target.namespace}/{target.workflow} is not valid; no "
                           "run starts until its author fixes it (the delivery is kept for an admin to replay)",
                           detail=target.invalid)
        if target.suspended:
            return Refusal(409, "Suspended", f"Workflow {target.namespace}/{target.workflow} is suspended "
                           "(spec.suspend: true); no run starts until it is resumed")
        limit = target.webhook.rate_limit_per_minute
        wait = self._limiter.take((target.namespace, target.workflow, target.trigger.name), limit, monotonic)
        if wait is not None:
            return Refusal(429, "RateLimited", f"more than {limit} deliveries a minute for this trigger "
                           "(rateLimitPerMinute); retry later", retry_after=wait)
        if target.cloud_event is not None:
            return await self._cloud_event(target, target.cloud_event, media, headers, raw)
        body = parse_body(media, raw)
        if isinstance(body, Refusal):
            return body
        context = {"body": body, "headers": visible_headers(headers)}
        keep = passes_filter(target.webhook, context)
        if isinstance(keep, Refusal):
            return keep
        if not keep:
            return Accepted(202, None, "filtered: the trigger's filter is false for this delivery; no run started")
        data = trigger_data(target.webhook, context)
        if isinstance(data, Refusal):
            return data
        identity = delivery_identity(target.webhook, verified, headers, body, now=now)
        if isinstance(identity, Refusal):
            return identity
        name = webhook_run_name(target.namespace, target.workflow, target.trigger.name, identity.key)
        return await self._create(target, name, identity, data)

    async def _cloud_event(
        self, target: Target, trigger: CloudEventTrigger, media: str, headers: dict[str, str], raw: bytes
    ) -> Accepted | Refusal:
        """A verified CloudEvent: parsed, matched by type and source, filtered, mapped; one run per source and id."""
        event = parse_event(media, headers, raw)
        if isinstance(event, Refusal):
            return event
        mismatch = matches(trigger, event)
        if mismatch is not None:
            return Accepted(202, None, f"ignored: {mismatch}; no run started")
        context = event.as_cel()
        keep = passes_filter(trigger, context)
        if isinstance(keep, Refusal):
            return keep
        if not keep:
            return Accepted(202, None, "filtered: the trigger's filter is false for this event; no run started")
        data = trigger_data(trigger, context)
        if isinstance(data, Refusal):
            return data
        identity = DeliveryIdentity(event_identity(event), event.id, keyed_by_id=True)
        name = webhook_run_name(target.namespace, target.workflow, target.trigger.name, identity.key)
        return await self._create(target, name, identity, data)

    async def _create(self, target: Target, name: str, identity: DeliveryIdentity, data: JSON) -> Accepted | Refusal:
        delivery_id = identity.delivery_id
        trigger: JSON = {"type": "webhook", "name": target.trigger.name, "data": data}
        if delivery_id is not None:
            trigger["deliveryId"] = delivery_id
        body: JSON = {
            "apiVersion": API_VERSION,
            "kind": "WorkflowRun",
            "metadata": {
                "name": name,
                "namespace": target.namespace,
                "labels": {LABEL_WORKFLOW: target.workflow, LABEL_TRIGGER: identifier_label(target.trigger.name),
                           LABEL_MANAGED_BY: MANAGER},
                "ownerReferences": [{"apiVersion": API_VERSION, "kind": "Workflow", "name": target.workflow,
                                     "uid": target.uid}],
            },
            "spec": {
                "workflowRef": {"name": target.workflow},
                "params": target.trigger.params,
                "trigger": trigger,
                "requestedBy": self.requested_by,
            },
        }
        delivery = self._tracer.begin() if self._tracer is not None else None
        if delivery is not None:
            body["metadata"]["annotations"] = {TRACEPARENT_ANNOTATION: delivery.traceparent}
        try:
            run, created = await create_run(self._api, target.namespace, body)
        except ApiError as error:
            log.warning("%s/%s trigger %s: the API server refused run %s: %s",
                        target.namespace, target.workflow, target.trigger.name, name, error.message)
            if error.transient:  # busy or away: the sender's redelivery (same delivery id) starts the run once
                return Refusal(503, "ApiServerBusy", "the API server cannot take the run now; send the delivery "
                               "again", retry_after=max(1, round(error.retry_after or 1)))
            return Refusal(502, "RunRefused", f"the API server refused the run: {error.message[:300]}")
        if created:
            if self._tracer is not None and delivery is not None:
                self._tracer.created(delivery, namespace=target.namespace, workflow=target.workflow,
                                     trigger=target.trigger.name, run=name)
            return Accepted(202, name, "run created")
        spec = run.get("spec") or {}
        same = (spec.get("workflowRef", {}).get("name") == target.workflow
                and spec.get("trigger", {}).get("type") == "webhook"
                and spec.get("trigger", {}).get("name") == target.trigger.name
                and (not identity.keyed_by_id or spec.get("trigger", {}).get("deliveryId") == delivery_id))
        if not same:
            log.warning("%s/%s trigger %s: run %s exists but was not started by this trigger's delivery",
                        target.namespace, target.workflow, target.trigger.name, name)
            return Refusal(409, "NameTaken", f"a WorkflowRun named {name} exists that this delivery did not start; "
                           "delete it or send the delivery with another id")
        return Accepted(200, name, "redelivery: the run for this delivery already exists")


KEPT_REFUSALS = frozenset({"Suspended", "WorkflowInvalid", "ApiServerBusy"})
FILTERED = "filtered: "


def kept_reason(outcome: Accepted | Refusal) -> str | None:
    """Why a verified delivery becomes a dead letter: its filter was false, or one of KEPT_REFUSALS; else None."""
    if isinstance(outcome, Refusal):
        return outcome.reason if outcome.reason in KEPT_REFUSALS else None
    return "Filtered" if outcome.run is None and outcome.message.startswith(FILTERED) else None


def _key_unavailable() -> Refusal:
    return Refusal(503, "SigningKeyUnavailable", "the trigger's signing key is not available to the ingress; its "
                   "log says why (usually a missing Secret or a missing grant, see docs/ingress.md)", retry_after=30)
