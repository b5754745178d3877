"""A watch-fed, read-only cache of every Workflow, for the webhook ingress.

The one list+watch of every process (towline.k8s.reflector): a list in pages, then a watch from its
resourceVersion (with bookmarks), listing again when the API server answers 410 Gone, with the same backoff
after any failure; its events feed one store (towline.k8s.indexer). Lookups never touch the API server. A
(re-)list replaces the whole cache when it ends, so a Workflow deleted while the watch was down is forgotten;
until then lookups see the previous list. `synced` is
set after the first complete list: until then the ingress is not ready. Consumers get the stored dict and must
not modify it.
"""

from __future__ import annotations

import asyncio
import logging

from towline.jsontypes import JSON
from towline.k8s.client import WORKFLOWS, KubeApi
from towline.k8s.indexer import Feed, ObjectKey, Store, object_key
from towline.k8s.reflector import SYNCED
from towline.k8s.streams import Following

log = logging.getLogger(__name__)



class WorkflowCache:
    """Workflows by (namespace, name), kept current by a watch."""

    def __init__(self, api: KubeApi) -> None:
        self._objects: Store[ObjectKey, JSON] = Store()
        self._feed = Feed(self._objects, key_of=object_key, value_of=lambda body: body)
        self.synced = asyncio.Event()
        self._stream = Following(api, WORKFLOWS, self.take, what="Workflow", task_name="workflow-cache")

    def get(self, namespace: str, name: str) -> JSON | None:
        return self._objects.get((namespace, name))

    def __len__(self) -> int:
        return len(self._objects)

    def start(self) -> None:
        self._stream.start()

    async def stop(self) -> None:
        await self._stream.stop()

    def take(self, event: str, body: JSON) -> None:
        """One event of the stream: a (re-)list is collected apart and replaces the cache when it ends."""
        self._feed.take(event, body)
        if event == SYNCED:
            self.synced.set()
            log.info("workflow cache: %d workflow(s)", len(self._objects))
