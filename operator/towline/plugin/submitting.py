"""`run`'s extra inputs (--param-file, --name, --label, --dry-run, -o), `submit -f run.yaml` and `resubmit RUN`:
every run they create names as its requester the caller, as the API server reports it (SelfSubjectReview),
never a name copied from a file or from another run. Parsing is pure; `create` is the one API call.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from towline.jsontypes import JSON
from towline.k8s import session
from towline.k8s.client import KubeApi
from towline.plugin import manifests, output
from towline.plugin.manifests import UsageError

DRY_RUNS = ("client", "server")


def param_file(path: str) -> JSON:
    """`--param-file FILE`: a YAML or JSON mapping of param names to values."""
    try:
        loaded = yaml.safe_load(Path(path).read_text())
    except OSError as error:
        raise UsageError(f"--param-file {path}: {error.strerror}; pass a YAML or JSON file of NAME: VALUE") from error
    except yaml.YAMLError as error:
        raise UsageError(f"--param-file {path}: not YAML or JSON ({' '.join(str(error).split())})") from error
    if not isinstance(loaded, dict) or not all(isinstance(key, str) for key in loaded):
        raise UsageError(f"--param-file {path}: write a mapping of param names to values, e.g. threshold_days: 30")
    return loaded


def labels(pairs: list[str]) -> dict[str, str]:
    """`--label k=v` (repeatable): the new run's labels, set at creation."""
    parsed: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise UsageError(f"--label {pair!r}: write a label as KEY=VALUE, e.g. --label tier=gold")
        parsed[key] = value
    return parsed


def named(body: JSON, name: str | None, run_labels: dict[str, str]) -> JSON:
    """The run manifest with `--name` (instead of generateName) and `--label`s."""
    meta = dict(body["metadata"])
    if name:
        meta.pop("generateName", None)
        meta["name"] = name
    if run_labels:
        meta["labels"] = {**(meta.get("labels") or {}), **run_labels}
    return {**body, "metadata": meta}


def run_files(paths: list[str]) -> list[JSON]:
    """`submit -f FILE...` (`-` is stdin): every YAML document in them, each a WorkflowRun."""
    import sys  # noqa: PLC0415 - only for `-`

    runs: list[JSON] = []
    for path in paths:
        try:
            text = sys.stdin.read() if path == "-" else Path(path).read_text()
            documents = [doc for doc in yaml.safe_load_all(text) if doc is not None]
        except OSError as error:
            raise UsageError(f"-f {path}: {error.strerror}; pass a WorkflowRun manifest (YAML or JSON)") from error
        except yaml.YAMLError as error:
            raise UsageError(f"-f {path}: not YAML or JSON ({' '.join(str(error).split())})") from error
        for index, document in enumerate(documents, 1):
            where = f"-f {path}, document {index}"
            if not isinstance(document, dict) or document.get("kind") != "WorkflowRun":
                kind = document.get("kind") if isinstance(document, dict) else type(document).__name__
                raise UsageError(f"{where}: kind is {kind!r}; submit creates WorkflowRuns only "
                                 "(kubectl apply -f for other objects)")
            if not ((document.get("spec") or {}).get("workflowRef") or {}).get("name"):
                raise UsageError(f"{where}: spec.workflowRef.name is missing; name the Workflow to run")
            meta = document.get("metadata") or {}
            if not (meta.get("name") or meta.get("generateName")):
                raise UsageError(f"{where}: metadata.name or metadata.generateName is missing; "
                                 "e.g. generateName: nightly-")
            runs.append(document)
    if not runs:
        raise UsageError(f"-f {' '.join(paths)}: no WorkflowRun in it")
    return runs


def as_caller(document: JSON, user: str, where: str) -> JSON:
    """The run with spec.requestedBy the caller: filled in when absent, refused when it names somebody else."""
    spec = dict(document.get("spec") or {})
    given = spec.get("requestedBy")
    if given not in (None, user):
        raise UsageError(f"{where}: spec.requestedBy is {given!r} but you are {user!r}; remove the field "
                         "(submit fills it in) or submit as that user")
    spec["requestedBy"] = user
    return {**document, "spec": spec}


def resubmit_manifest(run: JSON, user: str) -> JSON:
    """A new manual run of RUN's Workflow with RUN's given params (spec.params; the Workflow's defaults for the
    rest, as it is now). Not its trigger, labels or requester: the new run is the caller's own."""
    spec = run.get("spec") or {}
    return manifests.run_manifest(spec["workflowRef"]["name"], dict(spec.get("params") or {}), user)


async def create(api: KubeApi, namespace: str, io: Any, body: JSON, *, dry_run: str | None,
                 form: str | None, note: str = "") -> JSON:
    """Create (or with `dry_run` only check) the run and report it: a `created` line, or the run in `form`."""
    target = (body.get("metadata") or {}).get("namespace") or namespace
    if dry_run == "client":
        run = body
    else:
        run = await session.create_run(api, target, body, dry_run=dry_run == "server")
    name = run["metadata"].get("name") or f"{run['metadata'].get('generateName', '')}(generated)"
    suffix = {"client": " (dry run)", "server": " (server dry run)"}.get(dry_run or "", "")
    line = f"workflowrun/{name} created{suffix}{note}"
    if form in ("json", "yaml"):
        io.err(line)
        io.out(output.dump({"apiVersion": manifests.RUN_API_VERSION, "kind": "WorkflowRun", **run}, form))
    elif form == "name":
        io.out(f"workflowrun/{name}")
    else:
        io.out(line)
    return run
