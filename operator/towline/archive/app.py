"""`towline archive`: the process that keeps the record (towline.archive.service) and signs it.

Besides the follower and writer it runs three clocks: every `checkpoint_seconds` it signs each namespace's chain head
that moved (an Ed25519 checkpoint: head, count, time); once an hour it verifies each chain as an auditor would
(what was written since the last verified checkpoint; all of it at start and daily; a failure is a metric and an
alert, never silence); once a day, with `retention_days` set, it prunes what is older
(a signed prune record keeps the chain verifiable). /healthz answers while the event loop turns; /readyz once the
store is open and the streams have listed.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import TypeVar

from aiohttp import web
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from prometheus_client import CONTENT_TYPE_LATEST, Counter, Gauge, Histogram, generate_latest

from towline.archive.apiserver import serve_archive_api
from towline.archive.chain import Checkpoint, load_private_key
from towline.archive.records import ArchiveError, parse_time
from towline.archive.service import JOB_TTL_SECONDS, LOG_CAP_BYTES, ArchiveService
from towline.archive.store import ArchiveStore, open_store
from towline.k8s.client import KubeApi

log = logging.getLogger("towline.archive")
T = TypeVar("T")

RECORDS = Counter("towline_archive_records_total", "Records written into the archive", ["kind"])
LOGS_CUT = Counter("towline_archive_logs_cut_total", "Step container logs cut at archive.logCapBytes")
LAG = Histogram("towline_archive_lag_seconds", "From a run's end to its record in the archive",
                buckets=(1, 5, 15, 60, 300, 900, 3600, 21600, 86400))
DATABASE_ERRORS = Counter("towline_archive_database_errors_total", "Failed writes and reads of the archive database")
CHECKPOINT_AGE = Gauge("towline_archive_checkpoint_age_seconds",
                       "Seconds since the newest signed checkpoint of a namespace's chain", ["namespace"])
UNSIGNED = Gauge("towline_archive_unsigned_records", "Records of a namespace after its newest checkpoint",
                 ["namespace"])
CHAIN_VERIFIED = Gauge("towline_archive_chain_verified",
                       "1 when a namespace's chain verified at the last check, 0 when it did not", ["namespace"])
WAITING = Gauge("towline_archive_runs_waiting", "Runs that ended (or are being deleted) and are not archived yet")

VERIFY_EVERY = timedelta(hours=1)
FULL_VERIFY_EVERY = timedelta(days=1)
PRUNE_EVERY = timedelta(days=1)


@dataclass(frozen=True)
class ArchiveSettings:
    """The archive's settings, from the environment the chart sets (values `archive.*`)."""

    database_url: str
    signing_key_file: Path
    namespaces: tuple[str, ...] = ()
    retention_days: int = 0
    log_cap_bytes: int = LOG_CAP_BYTES
    job_ttl_seconds: int = JOB_TTL_SECONDS
    checkpoint_seconds: float = 60.0
    metrics_port: int = 9091
    health_port: int = 8081
    listen_address: str = "0.0.0.0"  # noqa: S104 - in a pod the kubelet and Prometheus reach it there

    @classmethod
    def from_environment(cls, env: Mapping[str, str] | None = None) -> ArchiveSettings:
        env = os.environ if env is None else env
        url = env.get("TOWLINE_ARCHIVE_DATABASE_URL", "")
        if not url:
            raise ArchiveError("TOWLINE_ARCHIVE_DATABASE_URL is empty: set archive.database.urlSecret in the chart "
                               "values (PostgreSQL), or leave it empty for SQLite on the archive's volume")
        key = env.get("TOWLINE_ARCHIVE_SIGNING_KEY_FILE", "")
        if not key:
            raise ArchiveError("TOWLINE_ARCHIVE_SIGNING_KEY_FILE is empty: the archive signs its checkpoints with an "
                               "Ed25519 key (archive.signingKey in the chart values)")
        return cls(
            database_url=url, signing_key_file=Path(key),
            namespaces=tuple(n.strip() for n in env.get("TOWLINE_WATCH_NAMESPACES", "").split(",") if n.strip()),
            retention_days=_whole(env, "TOWLINE_ARCHIVE_RETENTION_DAYS", 0, "archive.retentionDays"),
            log_cap_bytes=_whole(env, "TOWLINE_ARCHIVE_LOG_CAP_BYTES", LOG_CAP_BYTES, "archive.logCapBytes"),
            job_ttl_seconds=_whole(env, "TOWLINE_JOB_TTL_SECONDS", JOB_TTL_SECONDS,
                                   "runner.jobTTLSecondsAfterFinished"),
            checkpoint_seconds=_whole(env, "TOWLINE_ARCHIVE_CHECKPOINT_SECONDS", 60, "archive.checkpointSeconds"),
            metrics_port=_whole(env, "TOWLINE_METRICS_PORT", 9091, "archive.metricsPort"),
            health_port=_whole(env, "TOWLINE_HEALTH_PORT", 8081, "archive.healthPort"),
            listen_address=env.get("TOWLINE_METRICS_ADDRESS", "0.0.0.0"),  # noqa: S104
        )


def _whole(env: Mapping[str, str], name: str, default: int, value: str) -> int:
    text = env.get(name, str(default)).strip()
    if not text.isdigit():
        raise ArchiveError(f"{name}={text!r} must be a whole number (chart value {value})")
    return int(text)


def read_signing_key(path: Path) -> Ed25519PrivateKey:
    try:
        pem = path.read_bytes()
    except OSError as error:
        raise ArchiveError(f"the signing key {path} cannot be read ({error.strerror}): mount the Secret "
                           "archive.signingKey names, key signing-key.pem") from error
    return load_private_key(pem)


class ArchiveProcess:
    """The archive's tasks around one store: the service, the clocks, health and metrics."""

    def __init__(self, api: KubeApi, store: ArchiveStore, key: Ed25519PrivateKey, settings: ArchiveSettings) -> None:
        self.settings = settings
        self.store = store
        self.key = key
        self.lock = asyncio.Lock()
        self.service = ArchiveService(api, store, namespaces=settings.namespaces, log_cap_bytes=settings.log_cap_bytes,
                                      job_ttl_seconds=settings.job_ttl_seconds, database=self.database)
        self.ready = False

    async def database(self, call: Callable[[], T]) -> T:
        """A store call in a worker thread, one at a time (the store serializes too): the loop never blocks."""
        async with self.lock:
            try:
                return await asyncio.to_thread(call)
            except Exception:
                DATABASE_ERRORS.inc()
                raise

    async def serve(self) -> None:
        await self.start_http()
        self.ready = True
        await asyncio.gather(self.service.serve(), self.sign_forever(), self.verify_forever(), self.prune_forever(),
                             self.count_forever())

    async def sign_forever(self) -> None:
        while True:
            await asyncio.sleep(self.settings.checkpoint_seconds)
            try:
                await self.sign_heads()
            except Exception as error:  # the next round tries again; the age metric and its alert tell
                log.warning("signing checkpoints failed (%s: %s)", type(error).__name__, error)

    async def sign_heads(self) -> None:
        now = datetime.now(UTC)
        for namespace in await self.database(self.store.namespaces):
            await self.database(partial(self.store.sign_head, namespace, self.key, now))
            latest = await self.database(partial(self.store.latest_checkpoint, namespace))
            head_seq, _ = await self.database(partial(self.store.head, namespace))
            if latest is not None:
                signed = parse_time(latest.signed_at, f"the checkpoint of {namespace}")
                CHECKPOINT_AGE.labels(namespace).set((now - signed).total_seconds())
                UNSIGNED.labels(namespace).set(head_seq - latest.seq)

    async def verify_forever(self) -> None:
        """Every hour, each namespace's records since the newest checkpoint the last pass verified; from the chain's
        first record at start and once a day, so a record changed long ago is named within a day while the hourly
        pass reads only what was written since (its cost does not grow with the archive)."""
        public = self.key.public_key()
        anchors: dict[str, Checkpoint] = {}
        full_pass_at: datetime | None = None
        while True:
            now = datetime.now(UTC)
            if full_pass_at is None or now - full_pass_at >= FULL_VERIFY_EVERY:
                anchors.clear()
                full_pass_at = now
            for namespace in await self.database(self.store.namespaces):
                try:
                    result = await self.database(partial(self.store.verify, namespace, public, anchors.get(namespace)))
                    anchor = anchors.get(namespace)
                    if result.ok and result.signed_through > (anchor.seq if anchor else 0):
                        later = await self.database(partial(self.store.checkpoints, namespace, result.signed_through))
                        anchors[namespace] = later[0]
                except Exception as error:
                    log.warning("verifying %s failed (%s: %s)", namespace, type(error).__name__, error)
                    continue
                CHAIN_VERIFIED.labels(namespace).set(1 if result.ok else 0)
                if not result.ok:
                    anchors.pop(namespace, None)
                    log.error("the archive of %s does not verify: %s", namespace, result)
            await asyncio.sleep(VERIFY_EVERY.total_seconds())

    async def prune_forever(self) -> None:
        if not self.settings.retention_days:
            return
        while True:
            now = datetime.now(UTC)
            before = now - timedelta(days=self.settings.retention_days)
            for namespace in await self.database(self.store.namespaces):
                try:
                    await self.database(partial(self.store.prune, namespace, before, self.key, now))
                except Exception as error:
                    log.warning("pruning %s failed (%s: %s)", namespace, type(error).__name__, error)
            await asyncio.sleep(PRUNE_EVERY.total_seconds())

    async def count_forever(self) -> None:
        """Keep the counters in step with the service's own tallies (it counts; the metrics are read here)."""
        counted: dict[str, int] = {}
        cut = 0
        while True:
            for kind, total in list(self.service.written.items()):
                RECORDS.labels(kind).inc(total - counted.get(kind, 0))
                counted[kind] = total
            LOGS_CUT.inc(self.service.logs_cut - cut)
            cut = self.service.logs_cut
            for lag in self.service.take_lags():
                LAG.observe(lag)
            WAITING.set(sum(1 for what, _, _ in self.service.state.pending if what == "run"))
            await asyncio.sleep(1.0)

    async def start_http(self) -> None:
        health = web.Application()
        health.router.add_get("/healthz", self.healthz)
        health.router.add_get("/readyz", self.readyz)
        metrics = web.Application()
        metrics.router.add_get("/metrics", self.metrics)
        for app, port in ((health, self.settings.health_port), (metrics, self.settings.metrics_port)):
            if not port:
                continue
            runner = web.AppRunner(app, access_log=None)
            await runner.setup()
            await web.TCPSite(runner, self.settings.listen_address, port).start()

    async def healthz(self, _: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def readyz(self, _: web.Request) -> web.Response:
        return web.Response(text="ready" if self.ready else "starting", status=200 if self.ready else 503)

    async def metrics(self, _: web.Request) -> web.Response:
        return web.Response(body=generate_latest(), headers={"Content-Type": CONTENT_TYPE_LATEST})


async def run_archive(kubeconfig: str | None, settings: ArchiveSettings) -> None:
    key = read_signing_key(settings.signing_key_file)
    store = await asyncio.to_thread(open_store, settings.database_url, now=datetime.now(UTC))
    api = await KubeApi.connect(kubeconfig)
    log.info("archive: %s, namespaces %s, schema version %s", settings.database_url.split("://", 1)[0],
             ", ".join(settings.namespaces) or "all", store.schema_version())
    # The read API (archive.towline.dev, aggregated): its own connection, so its reviews never wait behind a
    # stream's list; off when no serving certificate is configured.
    reads = api.separate()
    server = await serve_archive_api(reads, store)
    try:
        await ArchiveProcess(api, store, key, settings).serve()
    finally:
        if server is not None:
            await server.stop()
        await reads.close()
        await api.close()
        store.close()
