"""Which kubeconfig a person's command uses, read the way kubectl reads it.

`--kubeconfig FILE` names exactly one file, which must exist. Otherwise every
file of `$KUBECONFIG` (`a:b`, `;` on Windows) is merged with kubectl's rule,
"the first file to set a value wins": the first context, cluster or user of a
name is kept and the first non-empty `current-context` is the current one.
Without `$KUBECONFIG` it is `~/.kube/config`. The client library's own merger
keeps the *last* current-context, so that one value is set here again.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml
from kubernetes_asyncio.config.config_exception import ConfigException
from kubernetes_asyncio.config.kube_config import ENV_KUBECONFIG_PATH_SEPARATOR, KubeConfigLoader, KubeConfigMerger


class KubeconfigProblem(Exception):  # noqa: N818 - what the person sees: their kubeconfig is the problem
    """No kubeconfig file, an unreadable one, or a context it does not define."""


def paths(kubeconfig: str | None) -> list[Path]:
    """The files to read, in kubectl's order of precedence (missing entries of $KUBECONFIG are skipped)."""
    if kubeconfig:
        return [Path(kubeconfig).expanduser()]
    listed = os.environ.get("KUBECONFIG", "")
    if listed:
        return [Path(part).expanduser() for part in listed.split(ENV_KUBECONFIG_PATH_SEPARATOR) if part]
    return [Path.home() / ".kube" / "config"]


def merged(kubeconfig: str | None) -> KubeConfigMerger:
    """The merged configuration; raises KubeconfigProblem with the fix when there is none."""
    files = paths(kubeconfig)
    if kubeconfig and not files[0].is_file():
        raise KubeconfigProblem(f"--kubeconfig {kubeconfig}: no such file")
    present = [path for path in files if path.is_file()]
    if not present:
        where = "$KUBECONFIG (" + os.environ["KUBECONFIG"] + ")" if os.environ.get("KUBECONFIG") else str(files[0])
        raise KubeconfigProblem(f"no kubeconfig found at {where}; set KUBECONFIG or pass --kubeconfig FILE")
    documents: list[dict[str, Any]] = []
    for path in present:
        try:
            document = yaml.safe_load(path.read_text()) or {}
        except (OSError, yaml.YAMLError) as error:
            raise KubeconfigProblem(f"cannot read kubeconfig {path}: {_one_line(error)}") from error
        if not isinstance(document, dict):
            raise KubeconfigProblem(f"kubeconfig {path} is not a mapping")
        documents.append(document)
    try:
        merger = KubeConfigMerger(ENV_KUBECONFIG_PATH_SEPARATOR.join(str(path) for path in present))
    except (OSError, yaml.YAMLError, TypeError, KeyError, AttributeError) as error:
        raise KubeconfigProblem(f"cannot merge kubeconfig {':'.join(map(str, present))}: {_one_line(error)}") from error
    first = next((doc["current-context"] for doc in documents if doc.get("current-context")), None)
    if merger.config is not None and first is not None:
        merger.config.value["current-context"] = first
    return merger


def current_context(kubeconfig: str | None, context: str | None) -> dict[str, Any]:
    """The `context` entry of the context in use (`--context`, else current-context); {} when none is set."""
    config = merged(kubeconfig).config
    document = config.value if config is not None else {}
    wanted = context or document.get("current-context")
    for node in document.get("contexts") or []:
        entry = getattr(node, "value", node)  # the merger wraps each entry in a ConfigNode
        if isinstance(entry, dict) and entry.get("name") == wanted:
            return dict(entry.get("context") or {})
    if context:
        raise KubeconfigProblem(f"--context {context}: no such context in the kubeconfig")
    return {}


def namespace(kubeconfig: str | None, context: str | None) -> str:
    """The namespace of the context in use (as kubectl picks it), else `default`."""
    return str(current_context(kubeconfig, context).get("namespace") or "default")


async def load(kubeconfig: str | None, context: str | None, configuration: Any) -> None:
    """Fill a kubernetes-asyncio Configuration from the merged kubeconfig and the chosen context."""
    merger = merged(kubeconfig)
    try:
        loader = KubeConfigLoader(config_dict=merger.config, config_base_path=None, active_context=context,
                                  config_persister=merger.save_changes)
        await loader.load_and_set(configuration)
    except ConfigException as error:
        raise KubeconfigProblem(f"kubeconfig: {_one_line(error)}") from error


def _one_line(error: BaseException) -> str:
    return " ".join(str(error).split())
