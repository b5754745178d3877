"""A real PostgreSQL server for the archive's tests and benchmark: Debian's build, started as a plain process.

Like the control plane, it is started by the tooling, not by a service manager: `initdb` into a fresh
directory, then `postgres` listening on a unix socket in that directory (and, when asked, on a TCP
address with password authentication), stopped and deleted afterwards. PostgreSQL refuses to run as
root, so as root it runs as `nobody` (through `setpriv`, which execs rather than forks, so the server is
our direct child and dies with us). The socket directory is private (0700): only its owner and root
reach the password-less local socket.

    with running_postgres(progress=print) as server:
        url = server.create_database("t1")          # postgresql://towline@/t1?host=/tmp/...
"""

from __future__ import annotations

import contextlib
import os
import pwd
import secrets
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

from towline_dev.debpackages import ensure_debian_packages
from towline_dev.processes import free_loopback_port, spawn, stop_process, wait_for
from towline_dev.versions import POSTGRESQL_PACKAGES

Progress = Callable[[str], None]

SUPERUSER = "towline"
UNPRIVILEGED_USER = "nobody"
START_TIMEOUT_SECONDS = 60


def postgres_bin_dir() -> Path:
    """Debian's directory of the pinned major version's server binaries (`postgresql-15` -> .../15/bin)."""
    (package,) = (name for name in POSTGRESQL_PACKAGES if name.startswith("postgresql-"))
    return Path("/usr/lib/postgresql") / package.removeprefix("postgresql-") / "bin"


@dataclass
class PostgresServer:
    """A running server: `url(database)` to reach it over its socket, `tcp_url` when it listens on TCP."""

    base_dir: Path
    port: int
    password: str
    tcp_address: str | None
    process: subprocess.Popen[bytes]

    @property
    def socket_dir(self) -> Path:
        return self.base_dir / "socket"

    @property
    def log_path(self) -> Path:
        return self.base_dir / "postgres.log"

    def url(self, database: str = "postgres") -> str:
        """A libpq URI over the unix socket (no password: the socket's directory is private)."""
        return f"postgresql://{SUPERUSER}@/{quote(database)}?host={quote(str(self.socket_dir))}&port={self.port}"

    def tcp_url(self, database: str = "postgres") -> str:
        if self.tcp_address is None:
            raise RuntimeError("this server listens on its unix socket only; start it with tcp_address=...")
        return (f"postgresql://{SUPERUSER}:{quote(self.password, safe='')}@{self.tcp_address}:{self.port}/"
                f"{quote(database)}")

    def psql(self, sql: str, database: str = "postgres") -> str:
        """Run SQL with Debian's psql as the superuser; its output (tuples only, unaligned)."""
        result = subprocess.run(
            [str(self.bin("psql")), "-X", "-q", "-t", "-A", "-v",
             "ON_ERROR_STOP=1", "-d", self.url(database), "-c", sql],
            capture_output=True, text=True, check=False, timeout=120)
        if result.returncode != 0:
            raise RuntimeError(f"psql failed: {result.stderr.strip()}")
        return result.stdout

    def create_database(self, name: str) -> str:
        """A new, empty database; its socket URL."""
        self.psql(f'CREATE DATABASE "{name}"')
        return self.url(name)

    @staticmethod
    def bin(name: str) -> Path:
        return postgres_bin_dir() / name

    def stop(self) -> None:
        """Fast shutdown (SIGINT: ends sessions, checkpoints), then make sure the group is gone."""
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.process.pid, signal.SIGINT)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout=30)
        stop_process(self.process)


def start_postgres(
    progress: Progress, *, tcp_address: str | None = None, durable: bool = False, base_dir: Path | None = None,
) -> PostgresServer:
    """initdb and start a server in a new private directory; `durable=False` turns off fsync (tests only:
    a crash loses nothing a test needs, and the disk is shared with the other engineers' builds)."""
    ensure_debian_packages(POSTGRESQL_PACKAGES, progress, purpose="the archive's PostgreSQL tests")
    base = base_dir or Path(tempfile.mkdtemp(prefix="towline-postgres-"))
    data, sockets = base / "data", base / "socket"
    data.mkdir(mode=0o700)
    sockets.mkdir(mode=0o700)
    password = secrets.token_urlsafe(24)
    pwfile = base / "pwfile"
    pwfile.write_text(password + "\n")
    as_user = _unprivileged_prefix()
    if as_user:
        account = pwd.getpwnam(UNPRIVILEGED_USER)
        for path in (base, data, sockets, pwfile):
            os.chown(path, account.pw_uid, account.pw_gid)
    initdb = subprocess.run(
        [*as_user, str(postgres_bin_dir() / "initdb"), "-D", str(data), "-U", SUPERUSER, "-E", "UTF8",
         "--locale=C", "--auth-local=trust", "--auth-host=scram-sha-256", f"--pwfile={pwfile}", "--no-sync"],
        capture_output=True, text=True, check=False, timeout=300)
    pwfile.unlink()
    if initdb.returncode != 0:
        raise RuntimeError(f"initdb failed (exit {initdb.returncode}): {initdb.stderr.strip()[-2000:]}")
    port = free_loopback_port()
    settings = {
        "listen_addresses": tcp_address or "",
        "port": str(port),
        "unix_socket_directories": str(sockets),
        "fsync": "on" if durable else "off",
        "synchronous_commit": "on" if durable else "off",
        "full_page_writes": "on" if durable else "off",
        "max_connections": "50",
        "logging_collector": "off",
    }
    if tcp_address:
        with (data / "pg_hba.conf").open("a") as hba:
            hba.write(f"host all {SUPERUSER} 0.0.0.0/0 scram-sha-256\n")
    argv = [*as_user, str(postgres_bin_dir() / "postgres"), "-D", str(data),
            *(option for name, value in settings.items() for option in ("-c", f"{name}={value}"))]
    progress(f"PostgreSQL ({postgres_bin_dir()}) starting in {base} on port {port}")
    process = spawn(argv, log_path=base / "postgres.log")
    server = PostgresServer(base_dir=base, port=port, password=password, tcp_address=tcp_address, process=process)

    def ready() -> bool:
        if process.poll() is not None:
            raise RuntimeError(f"postgres exited ({process.returncode}): {server.log_path.read_text()[-2000:]}")
        probe = subprocess.run([str(postgres_bin_dir() / "pg_isready"), "-q", "-h", str(sockets), "-p", str(port)],
                               check=False)
        return probe.returncode == 0

    try:
        wait_for(ready, timeout=START_TIMEOUT_SECONDS, interval=0.2, what="PostgreSQL to accept connections")
    except BaseException:
        server.stop()
        raise
    return server


@contextlib.contextmanager
def running_postgres(
    progress: Progress, *, tcp_address: str | None = None, durable: bool = False, keep: bool = False,
) -> Iterator[PostgresServer]:
    """A server for the block; stopped and its directory deleted afterwards (unless `keep`)."""
    server = start_postgres(progress, tcp_address=tcp_address, durable=durable)
    try:
        yield server
    finally:
        server.stop()
        if not keep:
            shutil.rmtree(server.base_dir, ignore_errors=True)


def _unprivileged_prefix() -> list[str]:
    """How to run the server's commands: as `nobody` when we are root (PostgreSQL refuses root); as we are
    otherwise. setpriv execs in place and sets the parent-death signal again after changing user (a change
    of user clears it), so the server dies with the process that started it."""
    if os.geteuid() != 0:
        return []
    return ["setpriv", f"--reuid={UNPRIVILEGED_USER}", "--regid=nogroup", "--clear-groups", "--pdeathsig=SIGKILL",
            "--"]
