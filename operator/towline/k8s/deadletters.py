"""The events sink's dead letters: one ConfigMap in the operator's namespace, bounded, kept across restarts.

Why a ConfigMap there: the sink is one setting of the whole installation (the chart's events.sink), so its failed
deliveries are the installation admin's to see and replay, not a team's; the operator's namespace is where only
admins read and write (the chart's Role gives the operator this one ConfigMap and nothing else there). A letter is
a few hundred bytes of ids, names and phases (towline.engine.events: never a secret, input or output), so
MAX_LETTERS fit far inside a ConfigMap's 1 MiB; past it the oldest go (counted in the log). A CRD would add an API
for this alone, and the archive is optional.

Replay is asked for with the annotation towline.dev/replay (`all`, or ids separated by commas) that
`kubectl towline deadletters replay` sets; the operator takes the letters named and removes them and the annotation
in one write that names the ConfigMap's resourceVersion, so of two replicas (or a repeated request) only one resends
each letter.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass

from towline.api.events import DeadLetter
from towline.jsontypes import JSON
from towline.k8s.client import CONFIG_MAPS, Conflict, KubeApi

log = logging.getLogger(__name__)

DEAD_LETTERS_CONFIG_MAP = "towline-event-dead-letters"
REPLAY_ANNOTATION = "towline.dev/replay"
REPLAY_ALL = "all"
MAX_LETTERS = 500
_WRITE_TRIES = 5



def letter_from(text: str) -> DeadLetter | None:
    """A stored letter; None for one that is not (a hand edit): it is left alone."""
    try:
        raw = json.loads(text)
        return DeadLetter(event=dict(raw["event"]), attempts=int(raw["attempts"]), error=str(raw["error"]),
                          failed_at=str(raw["failedAt"]))
    except (ValueError, KeyError, TypeError):
        return None


def letter_text(letter: DeadLetter) -> str:
    return json.dumps({"event": letter.event, "attempts": letter.attempts, "error": letter.error,
                       "failedAt": letter.failed_at}, separators=(",", ":"), sort_keys=True)


def letters_of(config_map: JSON | None) -> list[DeadLetter]:
    """The letters kept, oldest first."""
    data = (config_map or {}).get("data") or {}
    letters = [letter for text in data.values() if (letter := letter_from(text)) is not None]
    return sorted(letters, key=lambda letter: (letter.failed_at, letter.id))


async def read_dead_letters(api: KubeApi, namespace: str) -> list[DeadLetter]:
    return letters_of(await api.get(CONFIG_MAPS.path(namespace, DEAD_LETTERS_CONFIG_MAP)))


async def request_replay(api: KubeApi, namespace: str, ids: list[str] | None) -> list[DeadLetter]:
    """Ask the operator to resend these letters (None: all of them); the letters asked for. Raises LookupError
    naming an id that is not kept."""
    path = CONFIG_MAPS.path(namespace, DEAD_LETTERS_CONFIG_MAP)
    for _ in range(_WRITE_TRIES):
        config_map = await api.get(path)
        kept = {letter.id: letter for letter in letters_of(config_map)}
        if ids is not None:
            missing = [wanted for wanted in ids if wanted not in kept]
            if missing:
                raise LookupError(f"no dead letter {missing[0]!r} in namespace {namespace}; list them with "
                                  "`kubectl towline deadletters`")
        if config_map is None or not kept:
            return []
        annotations = dict(config_map["metadata"].get("annotations") or {})
        earlier = annotations.get(REPLAY_ANNOTATION, "")
        if ids is None or earlier == REPLAY_ALL:
            annotations[REPLAY_ANNOTATION] = REPLAY_ALL
        else:
            named = [item for item in earlier.split(",") if item]
            annotations[REPLAY_ANNOTATION] = ",".join(dict.fromkeys([*named, *ids]))
        config_map["metadata"]["annotations"] = annotations
        try:
            await api.replace(path, config_map)
        except Conflict:
            continue
        return list(kept.values()) if ids is None else [kept[wanted] for wanted in ids]
    raise Conflict(409, f"ConfigMap {DEAD_LETTERS_CONFIG_MAP} kept changing; try again")


def _age(text: str) -> tuple[str, str]:
    letter = letter_from(text)
    return ("", "") if letter is None else (letter.failed_at, letter.id)


async def keep_entry(api: KubeApi, namespace: str, name: str, key: str, text: str, *, limit: int,
                     age: Callable[[str], tuple[str, str]], owner: Callable[[str], str] = lambda key: key) -> int:
    """Write one letter into the dead-letter ConfigMap `name` (made when missing); past `limit` the oldest by `age`
    go (logged), each with the keys it `owner`s (a letter's replay mark). The number of letters kept. Every
    dead-letter store is this shape: one data key per letter, its JSON."""
    path = CONFIG_MAPS.path(namespace, name)
    for _ in range(_WRITE_TRIES):
        config_map = await api.get(path)
        if config_map is None:
            body: JSON = {"apiVersion": "v1", "kind": "ConfigMap",
                          "metadata": {"name": name, "namespace": namespace,
                                       "labels": {"app.kubernetes.io/part-of": "towline"}},
                          "data": {key: text}}
            _, created = await api.create(CONFIG_MAPS.path(namespace), body)
            if created:
                return 1
            continue
        data = dict(config_map.get("data") or {})
        data[key] = text
        letters = [kept for kept in data if owner(kept) == kept]
        over = len(letters) - limit
        if over > 0:
            oldest = set(sorted(letters, key=lambda kept: age(data[kept]))[:over])
            log.warning("dead letters in %s/%s over %d: the oldest %d dropped (%s)", namespace, name, limit, over,
                        ", ".join(sorted(oldest)))
            data = {kept: value for kept, value in data.items() if owner(kept) not in oldest}
        config_map["data"] = data
        try:
            await api.replace(path, config_map)
        except Conflict:
            continue
        return min(len(letters), limit)
    raise Conflict(409, f"ConfigMap {name} kept changing while keeping {key}")


@dataclass
class ConfigMapDeadLetters:
    """towline.api.events.DeadLetterStore over the ConfigMap (the operator's unfenced connection: every replica's
    sink keeps its own letters, whoever holds which shard)."""

    api: KubeApi
    namespace: str
    limit: int = MAX_LETTERS

    @property
    def path(self) -> str:
        return CONFIG_MAPS.path(self.namespace, DEAD_LETTERS_CONFIG_MAP)

    async def keep(self, letter: DeadLetter) -> int:
        return await keep_entry(self.api, self.namespace, DEAD_LETTERS_CONFIG_MAP, letter.id, letter_text(letter),
                                limit=self.limit, age=_age)

    async def take_replays(self) -> tuple[list[DeadLetter], int]:
        config_map = await self.api.get(self.path)
        if config_map is None:
            return [], 0
        annotations = dict(config_map["metadata"].get("annotations") or {})
        asked = annotations.pop(REPLAY_ANNOTATION, None)
        data = dict(config_map.get("data") or {})
        if asked is None:
            return [], len(data)
        wanted = set(data) if asked.strip() == REPLAY_ALL else {item.strip() for item in asked.split(",")}
        taken = [letter for letter in letters_of({"data": {key: data[key] for key in wanted if key in data}})]
        for letter in taken:
            data.pop(letter.id, None)
        config_map["data"] = data
        config_map["metadata"]["annotations"] = annotations
        try:
            await self.api.replace(self.path, config_map)
        except Conflict:  # another replica took them, or a letter came: the next look decides again
            return [], len(data) + len(taken)
        return taken, len(data)
