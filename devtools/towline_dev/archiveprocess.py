"""`towline archive` as a process of this machine, as the chart's archive ServiceAccount: tests stop, kill and
restart it as they do the operator (towline_dev.install.OperatorProcess)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from towline.archive.service import LOG_CAP_BYTES
from towline_dev.processes import spawn, stop_process

ARCHIVE_SERVICE_ACCOUNT = "towline-archive"
"""The chart's archive ServiceAccount (values archive.serviceAccount.name)."""


def write_signing_key(path: Path) -> Path:
    """A new Ed25519 key in PKCS#8 PEM, as the chart makes one (genPrivateKey "ed25519"); readable by its owner only."""
    key = Ed25519PrivateKey.generate()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch(mode=0o600)
    path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                       serialization.NoEncryption()))
    return path


@dataclass
class ArchiveProcess:
    """A running `towline archive`; `database_url` sqlite:////... or postgresql://..."""

    kubeconfig: Path
    log_path: Path
    database_url: str
    signing_key_file: Path
    watch_namespaces: tuple[str, ...] = ()
    checkpoint_seconds: int = 5
    log_cap_bytes: int = LOG_CAP_BYTES
    health_port: int = 0
    metrics_port: int = 0
    settings: dict[str, str] = field(default_factory=dict)
    process: subprocess.Popen[bytes] | None = None

    def start(self) -> ArchiveProcess:
        env = dict(os.environ)
        env.update(
            KUBECONFIG=str(self.kubeconfig),
            TOWLINE_ARCHIVE_DATABASE_URL=self.database_url,
            TOWLINE_ARCHIVE_SIGNING_KEY_FILE=str(self.signing_key_file),
            TOWLINE_WATCH_NAMESPACES=",".join(self.watch_namespaces),
            TOWLINE_ARCHIVE_CHECKPOINT_SECONDS=str(self.checkpoint_seconds),
            TOWLINE_ARCHIVE_LOG_CAP_BYTES=str(self.log_cap_bytes),
            TOWLINE_HEALTH_PORT=str(self.health_port),
            TOWLINE_METRICS_PORT=str(self.metrics_port),
            TOWLINE_METRICS_ADDRESS="127.0.0.1",
            TOWLINE_LOG_FORMAT="json",
        )
        env.update(self.settings)
        self.process = spawn([sys.executable, "-m", "towline.cli", "archive", "--kubeconfig", str(self.kubeconfig)],
                             log_path=self.log_path, env=env)
        return self

    def kill(self) -> None:
        if self.process and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)

    def stop(self) -> None:
        if self.process is not None:
            stop_process(self.process, grace_seconds=15)

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
