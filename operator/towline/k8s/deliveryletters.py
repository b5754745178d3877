"""The ingress's dead letters: deliveries it refused after checking their signature (or bearer), kept in the
Workflow's own namespace, bounded and redacted, for an admin to list and replay.

Where: the ConfigMap towline-dead-letters of the namespace the delivery was for, never the release's namespace. A
payload is the tenant's data; RBAC on a namespace's ConfigMaps is already who may read that tenant's things (the
namespace's admins and editors; a runner or viewer gets nothing), so tenant A's payload is never where tenant B may
read it. The store has the shape of the events sink's (towline.k8s.deadletters): one data key per letter, its JSON,
the oldest dropped past MAX_LETTERS.

What: kind `delivery`, workflow, trigger, time, reason, and the verified body (JSON, capped at MAX_PAYLOAD_BYTES,
else only its size) with the data the trigger maps from it (what a replay starts the run with). Headers are kept
without credentials: Authorization, Cookie, and every signature, token or key header are dropped by name, and the
whole letter passes the ingress's log redactor (which holds the signing keys it uses) before it is written.

Replay (`kubectl towline deadletters replay ID`) is done as the person who asks: they create the run themselves,
annotated towline.dev/replayed-by (their own name, which the chart's admission policy checks against the API
server's) and towline.dev/replay-of (this ConfigMap's letter), named from the letter's id so a second replay finds
the first's run; then the letter is marked replayed, naming the run.

Integrity: only the ingress writes a letter (the chart's policy towline-dead-letters). A replay never changes one:
it adds the letter's mark, the data key `<id>.replayed` (REPLAY_MARK_SUFFIX), which the policy lets a holder of the
replay verb write naming themselves; removing letters (a dismissal) takes the same verb. So the data a replay
starts a run with is what the ingress verified, whoever else may update the namespace's ConfigMaps.
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass, field
from typing import Any

from towline.jsontypes import JSON
from towline.k8s.client import CONFIG_MAPS, ApiError, Conflict, KubeApi
from towline.k8s.deadletters import keep_entry
from towline.logs import redact

log = logging.getLogger(__name__)

DELIVERY_LETTERS_CONFIG_MAP = "towline-dead-letters"
REPLAYED_BY_ANNOTATION = "towline.dev/replayed-by"
REPLAY_OF_ANNOTATION = "towline.dev/replay-of"
REPLAY_MARK_SUFFIX = ".replayed"
"""A letter's replay mark is the data key `<id>.replayed`: {"replayRun": ..., "replayedBy": ...}."""
MAX_LETTERS = 200
MAX_PAYLOAD_BYTES = 8192
"""A body larger than this is kept as its size only (200 letters stay far inside a ConfigMap's 1 MiB)."""
MAX_HEADER_BYTES = 2048
_WRITE_TRIES = 5
FORBIDDEN = 403
_CREDENTIAL_WORDS = ("authorization", "cookie", "signature", "token", "secret", "key", "hmac", "auth", "sig")



@dataclass
class DeliveryLetter:
    namespace: str
    workflow: str
    trigger: str
    reason: str
    failed_at: str
    size: int
    """The body's size in bytes."""
    payload: Any = None
    """The verified body (parsed JSON, or text), when it was at most MAX_PAYLOAD_BYTES."""
    data: JSON | None = None
    """The trigger's data mapping of the body: what a replay's run carries as trigger.data (None: not replayable)."""
    headers: dict[str, str] = field(default_factory=dict)
    kind: str = "delivery"
    replayed_by: str | None = None
    replay_run: str | None = None
    id: str = ""

    def __post_init__(self) -> None:
        if not self.id:
            seed = json.dumps([self.namespace, self.workflow, self.trigger, self.failed_at, self.reason,
                               self.size, self.payload], sort_keys=True, default=str)
            self.id = hashlib.sha256(seed.encode("utf-8", "surrogateescape")).hexdigest()[:20]

    def document(self) -> JSON:
        return {"id": self.id, "kind": self.kind, "namespace": self.namespace, "workflow": self.workflow,
                "trigger": self.trigger, "reason": self.reason, "failedAt": self.failed_at, "size": self.size,
                "payload": self.payload, "data": self.data, "headers": self.headers,
                "replayedBy": self.replayed_by, "replayRun": self.replay_run}


def kept_headers(headers: dict[str, str], extra_secret_headers: tuple[str, ...] = ()) -> dict[str, str]:
    """The headers worth keeping: none that names a credential or a signature, each value capped."""
    drop = {name.lower() for name in extra_secret_headers}
    kept: dict[str, str] = {}
    for name, value in sorted(headers.items()):
        lowered = name.lower()
        if lowered in drop or any(word in lowered for word in _CREDENTIAL_WORDS):
            continue
        kept[lowered] = value[:256]
        if len(json.dumps(kept)) > MAX_HEADER_BYTES:
            kept.pop(lowered)
            break
    return kept


def payload_of(raw: bytes, body: Any) -> Any:
    """What of the body is kept: itself when small enough, else None (its size is kept beside it)."""
    if len(raw) > MAX_PAYLOAD_BYTES:
        return None
    return body


def letter_text(letter: DeliveryLetter) -> str:
    """The stored form, through the redactor: a signing key the ingress knows never reaches the store."""
    return redact(json.dumps(letter.document(), separators=(",", ":"), sort_keys=True, default=str))


def letter_from(text: str) -> DeliveryLetter | None:
    try:
        raw = json.loads(text)
        return DeliveryLetter(
            namespace=str(raw["namespace"]), workflow=str(raw["workflow"]), trigger=str(raw["trigger"]),
            reason=str(raw["reason"]), failed_at=str(raw["failedAt"]), size=int(raw.get("size") or 0),
            payload=raw.get("payload"), data=raw.get("data"), headers=dict(raw.get("headers") or {}),
            kind=str(raw.get("kind") or "delivery"), replayed_by=raw.get("replayedBy"),
            replay_run=raw.get("replayRun"), id=str(raw["id"]))
    except (ValueError, KeyError, TypeError):
        return None


def mark_key(letter_id: str) -> str:
    return f"{letter_id}{REPLAY_MARK_SUFFIX}"


def mark_text(user: str, run: str) -> str:
    """The mark's stored form: the policy compares its end with `"replayedBy":"<the API server's user>"}`."""
    return json.dumps({"replayRun": run, "replayedBy": user}, separators=(",", ":"), sort_keys=True,
                      ensure_ascii=False)


def letter_owning(key: str) -> str:
    """The letter a data key belongs to: itself, or the letter a replay mark marks."""
    return key.removesuffix(REPLAY_MARK_SUFFIX)


def _marked(letter: DeliveryLetter, mark: str | None) -> DeliveryLetter:
    try:
        raw = json.loads(mark) if mark is not None else None
    except ValueError:
        raw = None
    if isinstance(raw, dict):
        by, run = raw.get("replayedBy"), raw.get("replayRun")
        letter.replayed_by = str(by) if by else None
        letter.replay_run = str(run) if run else None
    return letter


def letters_of(config_map: JSON | None) -> list[DeliveryLetter]:
    data = (config_map or {}).get("data") or {}
    letters = [_marked(letter, data.get(mark_key(key))) for key, text in data.items()
               if not key.endswith(REPLAY_MARK_SUFFIX) and (letter := letter_from(text)) is not None]
    return sorted(letters, key=lambda letter: (letter.failed_at, letter.id))


def _path(namespace: str) -> str:
    return CONFIG_MAPS.path(namespace, DELIVERY_LETTERS_CONFIG_MAP)


async def keep_delivery_letter(api: KubeApi, letter: DeliveryLetter) -> int:
    """Keep the letter in its namespace's store (the oldest go past MAX_LETTERS); the number kept."""
    return await keep_entry(api, letter.namespace, DELIVERY_LETTERS_CONFIG_MAP, letter.id, letter_text(letter),
                            limit=MAX_LETTERS, age=_age, owner=letter_owning)


def _age(text: str) -> tuple[str, str]:
    kept = letter_from(text)
    return ("", "") if kept is None else (kept.failed_at, kept.id)


async def read_delivery_letters(api: KubeApi, namespace: str | None) -> list[DeliveryLetter]:
    """The letters of one namespace, or (None) of every namespace the caller may list ConfigMaps in."""
    if namespace is not None:
        return letters_of(await api.get(_path(namespace)))
    listed = await api.request("GET", CONFIG_MAPS.path(),
                               query={"fieldSelector": f"metadata.name={DELIVERY_LETTERS_CONFIG_MAP}"})
    letters = [letter for item in listed.get("items") or [] for letter in letters_of(item)]
    return sorted(letters, key=lambda letter: (letter.failed_at, letter.id))


async def find_delivery_letter(api: KubeApi, namespace: str, letter_id: str) -> DeliveryLetter | None:
    return next((letter for letter in await read_delivery_letters(api, namespace) if letter.id == letter_id), None)


async def mark_replayed(api: KubeApi, letter: DeliveryLetter, user: str, run: str) -> None:
    """Record beside the letter who replayed it and the run it started: its mark, never the letter itself. The
    policy towline-dead-letters lets a person write only a mark naming themself, while the letter is kept: a mark
    naming someone else (a replay that found an earlier one's run) is refused and the letter stays unmarked; the
    run's annotations still say who replayed it."""
    for _ in range(_WRITE_TRIES):
        config_map = await api.get(_path(letter.namespace))
        if config_map is None or letter.id not in (config_map.get("data") or {}):
            return  # dropped past the bound meanwhile: the run's annotations still say what it replayed
        config_map["data"][mark_key(letter.id)] = mark_text(user, run)
        try:
            await api.replace(_path(letter.namespace), config_map)
        except Conflict:
            continue
        except ApiError as error:
            if error.status != FORBIDDEN:
                raise
            log.info("dead letter %s/%s not marked as replayed by %s: %s", letter.namespace, letter.id, user,
                     error.message)
        return
    raise Conflict(409, f"ConfigMap {DELIVERY_LETTERS_CONFIG_MAP} kept changing while marking {letter.id} replayed")
