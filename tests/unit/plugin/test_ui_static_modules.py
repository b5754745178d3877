"""The editor's ES modules as the browser fetches them (static/editor.js and what it imports): every file it
imports is in the package, and the page fetches few of them, the YAML library as one bundled module, so a busy
server or browser has few requests to lose (docs/web-view.md, "The libraries")."""

from __future__ import annotations

import fnmatch
import re
import tomllib
from pathlib import Path

from towline_dev import REPO_ROOT

STATIC = REPO_ROOT / "operator" / "towline" / "plugin" / "ui" / "static"
IMPORTS = (
    re.compile(r"""\bfrom\s*["'](\.{1,2}/[^"']+)["']"""),  # import … from "./x.js", export … from "./x.js"
    re.compile(r"""\bimport\s*\(\s*["'](\.{1,2}/[^"']+)["']\s*\)"""),  # import("./x.js")
    re.compile(r"""^\s*import\s*["'](\.{1,2}/[^"']+)["']""", re.MULTILINE),  # import "./x.js"
)
MOST_EDITOR_MODULES = 10
"""The editor's own modules (editor.js, editormain.js and the six it imports) and the YAML library's one."""


def imported(module: Path) -> list[Path]:
    text = module.read_text()
    return [(module.parent / found).resolve() for pattern in IMPORTS for found in pattern.findall(text)]


def module_graph(entry: Path) -> dict[Path, list[Path]]:
    """Each module reachable from `entry` and the files it imports (missing ones included, to be reported)."""
    graph: dict[Path, list[Path]] = {}
    waiting = [entry.resolve()]
    while waiting:
        module = waiting.pop()
        if module in graph or not module.is_file():
            continue
        graph[module] = imported(module)
        waiting.extend(graph[module])
    return graph


def test_every_file_the_editor_imports_is_in_the_static_folder() -> None:
    graph = module_graph(STATIC / "editor.js")
    missing = {str(target.relative_to(STATIC)): str(module.relative_to(STATIC))
               for module, targets in graph.items() for target in targets if not target.is_file()}
    assert not missing, f"imported but not in static/ (the browser would get 404): {missing}"
    assert all(module.is_relative_to(STATIC.resolve()) for module in graph)


def test_the_editors_page_fetches_its_modules_in_few_requests_the_yaml_library_in_one() -> None:
    graph = module_graph(STATIC / "editor.js")
    names = sorted(str(module.relative_to(STATIC.resolve())) for module in graph)
    assert len(graph) <= MOST_EDITOR_MODULES, (
        f"the editor's page fetches {len(graph)} modules ({', '.join(names[:12])}, …): bundle third-party code into "
        "one module (make ui-assets) rather than shipping its module tree")
    assert "vendor/yaml.js" in names and graph[(STATIC / "vendor" / "yaml.js").resolve()] == [], names


def test_the_package_ships_every_module_the_editor_imports() -> None:
    """The wheel's package data (pyproject.toml) holds each file the page fetches, so the installed view has it."""
    patterns = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"][
        "towline.plugin.ui"]
    package = STATIC.parent.resolve()
    unshipped = [str(module.relative_to(package)) for module in module_graph(STATIC / "editor.js")
                 if not any(fnmatch.fnmatch(str(module.relative_to(package)), pattern) for pattern in patterns)]
    assert not unshipped, f"not in pyproject.toml's package data for towline.plugin.ui: {unshipped}"
