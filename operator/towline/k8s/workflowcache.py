"""A watch-fed, read-only cache of every Workflow, for the webhook ingress.

One list, then a watch from its resourceVersion (with bookmarks), relisting
when the API server answers 410 Gone or the connection drops. Lookups never
touch the API server. `synced` is set after the first complete list: until
then the ingress is not ready. Consumers get the stored dict and must not
modify it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from kubernetes_asyncio import client, watch
from kubernetes_asyncio.client.exceptions import ApiException

from towline.k8s.client import WORKFLOWS, ApiError, KubeApi

log = logging.getLogger(__name__)

JSON = dict[str, Any]
WATCH_SECONDS = 240


class WorkflowCache:
    """Workflows by (namespace, name), kept current by a watch."""

    def __init__(self, api: KubeApi) -> None:
        self._api = api
        self._objects: dict[tuple[str, str], JSON] = {}
        self.synced = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def get(self, namespace: str, name: str) -> JSON | None:
        return self._objects.get((namespace, name))

    def __len__(self) -> int:
        return len(self._objects)

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="workflow-cache")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _run(self) -> None:
        delay = 0.5
        while True:
            try:
                version = await self._relist()
                delay = 0.5
                while True:
                    version = await self._watch(version)
            except asyncio.CancelledError:
                raise
            except (ApiException, ApiError) as error:
                if error.status != 410:
                    log.warning("workflow watch failed (%s); relisting in %.1f s", error.status, delay)
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, 30.0)
            except Exception as error:  # the watch must survive any transport failure
                log.warning("workflow watch failed (%s); relisting in %.1f s", type(error).__name__, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 30.0)

    async def _relist(self) -> str:
        listing = await self._api.request("GET", WORKFLOWS.path())
        self._objects = {
            (item["metadata"]["namespace"], item["metadata"]["name"]): item for item in listing.get("items", [])
        }
        self.synced.set()
        version: str = listing["metadata"]["resourceVersion"]
        log.info("workflow cache: %d workflow(s) at resourceVersion %s", len(self._objects), version)
        return version

    async def _watch(self, version: str) -> str:
        """Apply events until the server closes the watch; return the last resourceVersion seen."""
        custom = client.CustomObjectsApi(self._api.api_client)
        stream = watch.Watch()
        try:
            async for event in stream.stream(
                custom.list_cluster_custom_object, WORKFLOWS.group, WORKFLOWS.version, WORKFLOWS.plural,
                resource_version=version, allow_watch_bookmarks=True, timeout_seconds=WATCH_SECONDS,
            ):
                obj = event["raw_object"]
                meta = obj.get("metadata", {})
                version = meta.get("resourceVersion", version)
                if event["type"] == "BOOKMARK":
                    continue
                key = (meta["namespace"], meta["name"])
                if event["type"] == "DELETED":
                    self._objects.pop(key, None)
                else:
                    self._objects[key] = obj
        finally:
            stream.stop()
        return version
