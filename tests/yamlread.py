"""YAML read the fast way in the tests' own processes, and the CRDs as `make crds` writes them, read once per process.

PyYAML's pure-Python loader costs about ten times libyaml's for the same documents: helm's render of the chart
(about 360 KB, mostly the CRDs' schemas) 0.44 s of CPU against 0.05 s, the five generated CRDs 0.24 s against 0.04 s,
the same objects either way (docs/benchmarks-history.md, "The test suite's time"). Every pytest process of the suite
imports every test module when it collects, so what a module reads at import is paid in each of them.
"""

from __future__ import annotations

import copy
from functools import cache
from typing import Any

import yaml

from towline.api import crdgen

_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
"""libyaml's safe loader when PyYAML was built with it (its wheels are), PyYAML's own otherwise."""


def yaml_documents(text: str) -> list[dict[str, Any]]:
    """The YAML documents in `text`, empty ones left out."""
    return [document for document in yaml.load_all(text, Loader=_LOADER) if document]


@cache
def _generated() -> dict[str, dict[str, Any]]:
    return {name: yaml.load(text, Loader=_LOADER) for name, text in crdgen.generated_files().items()}


def generated_crds() -> dict[str, dict[str, Any]]:
    """File name (`workflows.towline.dev.yaml`) to the CRD `make crds` writes there; generated and read once per
    process, a copy of its own for each caller."""
    return copy.deepcopy(_generated())
