"""The pod bootstrap mounts the pod's files at the pod's paths without touching the host's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from towline_dev import podbootstrap

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux") or os.geteuid() != 0, reason="needs Linux and root for mount namespaces"
)


def run_bootstrap(tmp_path: Path, script: str, **spec: object) -> tuple[int, str, str]:
    (tmp_path / "scratch").mkdir(exist_ok=True)
    workdir = tmp_path / "workdir"
    workdir.mkdir(exist_ok=True)
    workdir.chmod(0o777)  # as the executor makes it, so any pod user may enter
    document = {
        "errorFile": str(tmp_path / "error"), "scratch": str(tmp_path / "scratch"), "mounts": [],
        "workingDir": "", "hostWorkingDir": str(workdir), "argv": [sys.executable, "-I", "-c", script],
        "expose": [sys.prefix], **spec,
    }
    # The bootstrap checks it is still the child of the process that started it.
    launcher = (
        "import json, os, subprocess, sys; spec = json.loads(sys.argv[1]); spec['parentPid'] = os.getpid(); "
        "open(sys.argv[2], 'w').write(json.dumps(spec)); "
        "sys.exit(subprocess.call([sys.executable, '-I', '-S', sys.argv[3], sys.argv[2]]))"
    )
    result = subprocess.run(
        [sys.executable, "-c", launcher, json.dumps(document), str(tmp_path / "spec.json"), podbootstrap.__file__],
        capture_output=True, text=True, timeout=60, check=False,
    )
    error = (tmp_path / "error").read_text() if (tmp_path / "error").exists() else ""
    return result.returncode, result.stdout + result.stderr, error


def test_volume_appears_read_only_at_a_path_the_host_does_not_have(tmp_path: Path) -> None:
    volume = tmp_path / "volume"
    volume.mkdir()
    (volume / "token").write_text("s3cret")
    target = f"/towline-unit-{os.getpid()}/creds"
    script = (f"print(open('{target}/token').read())\n"
              f"try:\n    open('{target}/x', 'w')\nexcept OSError as e:\n    print(e.strerror)")

    code, output, error = run_bootstrap(
        tmp_path, script, mounts=[{"source": str(volume), "target": target, "readOnly": True}]
    )

    assert (code, error) == (0, "")
    assert output.split("\n")[:2] == ["s3cret", "Read-only file system"]
    assert not Path(target).parent.exists()


def test_sources_stay_reachable_when_a_pod_mount_hides_their_host_path(tmp_path: Path) -> None:
    empty = tmp_path / "tmp-volume"
    empty.mkdir()
    message = tmp_path / "termination-log"
    message.touch()
    script = "import os; open('/dev/termination-log', 'w').write(str(sorted(os.listdir('/tmp'))))"

    code, output, error = run_bootstrap(tmp_path, script, mounts=[
        {"source": str(empty), "target": "/tmp", "readOnly": False},  # hides tmp_path itself
        {"source": str(message), "target": "/dev/termination-log", "readOnly": False},
    ])

    assert (code, error, output) == (0, "", "")
    # The volume is empty but for the way to the exposed code, when that code (a venv, a checkout)
    # itself lives under /tmp: it plays the image's role and stays reachable.
    under_tmp = {Path(p).relative_to("/tmp").parts[0] for p in [sys.prefix] if Path(p).is_relative_to("/tmp")}
    assert message.read_text() == str(sorted(under_tmp))


def test_the_process_runs_as_the_pods_user(tmp_path: Path) -> None:
    code, output, error = run_bootstrap(
        tmp_path, "import os; print(os.getuid(), os.getgid())", uid=65532, gid=65532, groups=[65532]
    )
    assert (code, error, output.strip()) == (0, "", "65532 65532")


def test_read_only_root_leaves_writable_volumes_writable(tmp_path: Path) -> None:
    scratch = tmp_path / "empty"
    scratch.mkdir()
    script = ("import os\nopen('/work-area/ok', 'w').write('x')\n"
              "try:\n    open(os.path.join(os.getcwd(), 'nope'), 'w')\nexcept OSError as e:\n    print(e.strerror)")
    code, output, error = run_bootstrap(
        tmp_path, script, readOnlyRootFilesystem=True,
        mounts=[{"source": str(scratch), "target": "/work-area", "readOnly": False}],
    )
    assert (code, error, output.strip()) == (0, "", "Read-only file system")
    assert (scratch / "ok").read_text() == "x"


def test_a_missing_command_is_a_start_error(tmp_path: Path) -> None:
    code, _, error = run_bootstrap(tmp_path, "", argv=["no-such-command-here"])
    assert code == podbootstrap.START_FAILURE
    assert error == 'exec: "no-such-command-here": executable file not found in $PATH'
