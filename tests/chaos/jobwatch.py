"""Every Job ever seen in a namespace, by name and UID, across API server and etcd restarts.

A Job deleted and made again under the same name (a second Job for one step attempt)
has a new UID; the watch sees both. When the watch breaks (the API server went away) it
resumes from the last resourceVersion; if that is too old (410) it lists again.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from typing import Any

from kubernetes import watch
from kubernetes.client.exceptions import ApiException

from towline.k8s.labels import LABEL_ATTEMPT, LABEL_RUN, LABEL_STEP
from towline_dev.clients import KubeClients

Attempt = tuple[str, str, str]
"""(run, step label, attempt)"""


class JobWatch:
    def __init__(self, clients: KubeClients, namespace: str) -> None:
        self._clients, self._namespace = clients, namespace
        self._lock = threading.Lock()
        self._uids: dict[Attempt, set[str]] = defaultdict(set)
        self._names: dict[Attempt, set[str]] = defaultdict(set)
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="chaos-job-watch", daemon=True)
        self.reconnects = 0

    def start(self) -> JobWatch:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        self._thread.join(timeout=40)

    def catch_up(self) -> None:
        """A final list, so nothing created just before the stop is missed."""
        for job in self._clients.batch.list_namespaced_job(self._namespace).items:
            self._record(job)

    def jobs_per_attempt(self) -> dict[Attempt, int]:
        """How many distinct Jobs (UIDs) each step attempt had."""
        with self._lock:
            return {attempt: len(uids) for attempt, uids in self._uids.items()}

    def names(self) -> dict[Attempt, set[str]]:
        with self._lock:
            return {attempt: set(names) for attempt, names in self._names.items()}

    def _record(self, job: Any) -> None:
        labels = job.metadata.labels or {}
        attempt = (labels.get(LABEL_RUN, ""), labels.get(LABEL_STEP, ""), labels.get(LABEL_ATTEMPT, ""))
        with self._lock:
            self._uids[attempt].add(job.metadata.uid)
            self._names[attempt].add(job.metadata.name)

    def _loop(self) -> None:
        version: str | None = None
        while not self._stopping.is_set():
            try:
                if version is None:
                    listing = self._clients.batch.list_namespaced_job(self._namespace, _request_timeout=10)
                    for job in listing.items:
                        self._record(job)
                    version = listing.metadata.resource_version
                stream = watch.Watch().stream(  # type: ignore[no-untyped-call]
                    self._clients.batch.list_namespaced_job, self._namespace, resource_version=version,
                    timeout_seconds=10, _request_timeout=20)
                for event in stream:
                    if event["type"] == "ERROR":
                        version = None
                        break
                    self._record(event["object"])
                    version = event["object"].metadata.resource_version
            except ApiException as error:
                if error.status == 410:
                    version = None
                self._pause()
            except Exception:  # the API server is away (restarting): come back
                self._pause()

    def _pause(self) -> None:
        self.reconnects += 1
        time.sleep(0.5)
