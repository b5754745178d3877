"""The images' Python pins agree with pyproject.toml, and the runner image lacks nothing it imports."""

from __future__ import annotations

import ast
import importlib.metadata
import json
import re
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from towline.k8s.objects import StepPodSettings
from towline_dev.images import REPO_ROOT
from towline_dev.versions import IMAGE_BUILD_TOOLS

IMAGES_DIR = REPO_ROOT / "images"


def constraints() -> dict[str, str]:
    pins: dict[str, str] = {}
    for raw in (IMAGES_DIR / "constraints.txt").read_text().splitlines():
        line = raw.split("#", 1)[0].strip()
        if line:
            name, _, version = line.partition("==")
            pins[canonicalize_name(name)] = version
    return pins


def runner_requirements() -> list[str]:
    lines = (IMAGES_DIR / "runner-requirements.txt").read_text().splitlines()
    return [canonicalize_name(line.strip()) for line in lines if line.strip() and not line.startswith("#")]


def project_dependencies() -> list[Requirement]:
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    return [Requirement(text) for text in project["dependencies"]]


OWN = "towline-step"
"""The project's own step kit (stepkit/): built beside the operator's wheel, never from a package index."""


def test_every_project_dependency_is_pinned_exactly_and_constrained_to_the_same_version() -> None:
    pins = constraints()
    for requirement in project_dependencies():
        if canonicalize_name(requirement.name) == OWN:
            continue
        specifiers = list(requirement.specifier)
        assert len(specifiers) == 1 and specifiers[0].operator == "==", f"{requirement} is not pinned with =="
        assert pins.get(canonicalize_name(requirement.name)) == specifiers[0].version, (
            f"images/constraints.txt disagrees with pyproject.toml on {requirement.name}; "
            "run `python -m towline_dev.images lock`"
        )


def test_the_operator_depends_on_its_own_step_kit_at_the_same_version() -> None:
    (own,) = [r for r in project_dependencies() if canonicalize_name(r.name) == OWN]
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    step_kit = tomllib.loads((REPO_ROOT / "stepkit" / "pyproject.toml").read_text())["project"]
    assert str(own.specifier) == f"=={project['version']}" == f"=={step_kit['version']}"
    assert OWN not in constraints(), "the step kit comes from stepkit/, not from a package index"


def test_the_wheel_build_tools_are_constrained_as_pinned() -> None:
    pins = constraints()
    for name, version in IMAGE_BUILD_TOOLS.items():
        assert pins.get(name) == version


def test_constraints_pin_every_line_exactly() -> None:
    for line in (IMAGES_DIR / "constraints.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            assert re.fullmatch(r"[A-Za-z0-9_.-]+==[A-Za-z0-9_.+!-]+", line), line


def test_runner_requirements_are_project_dependencies_so_they_are_pinned() -> None:
    declared = {canonicalize_name(r.name) for r in project_dependencies()}
    for name in runner_requirements():
        assert name in declared, f"{name} is in runner-requirements.txt but not pinned in pyproject.toml"
        assert name in constraints()


def test_runner_requirements_exclude_the_operator_side() -> None:
    assert not {"kopf", "kubernetes", "kubernetes-asyncio", "prometheus-client"} & set(runner_requirements())


def _imported_top_level_modules(package: Path) -> set[str]:
    names: set[str] = set()
    for source in package.rglob("*.py"):
        for node in ast.walk(ast.parse(source.read_text())):
            if isinstance(node, ast.Import):
                names.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.split(".")[0])
    return names - set(sys.stdlib_module_names) - FIRST_PARTY


FIRST_PARTY = {"towline_connectors", "towline_step"}
"""Packages of this repository the runner image copies in itself (images/runner.Containerfile), not from PyPI."""


def test_the_runner_image_copies_the_first_party_packages_the_connectors_import() -> None:
    containerfile = (IMAGES_DIR / "runner.Containerfile").read_text()
    assert "COPY connectors/towline_connectors " in containerfile
    assert "COPY stepkit/towline_step " in containerfile


def _closure(names: list[str]) -> set[str]:
    """The distributions pip installs for `names` (their runtime requirements, recursively)."""
    seen: set[str] = set()
    pending = list(names)
    while pending:
        name = canonicalize_name(pending.pop())
        if name in seen:
            continue
        seen.add(name)
        for text in importlib.metadata.requires(name) or []:
            requirement = Requirement(text)
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                pending.append(requirement.name)
    return seen


# towline_step.manifest imports PyYAML only to print YAML, on an author's machine; the image never does.
@pytest.mark.parametrize(("package", "not_in_the_image"), [
    ("connectors/towline_connectors", set()),
    ("stepkit/towline_step", {"yaml"}),
])
def test_everything_the_copied_packages_import_is_installed_in_the_runner_image(
    package: str, not_in_the_image: set[str]
) -> None:
    distributions = importlib.metadata.packages_distributions()
    installed = _closure(runner_requirements())
    for module in sorted(_imported_top_level_modules(REPO_ROOT / package) - not_in_the_image):
        owners = {canonicalize_name(d) for d in distributions.get(module, [])}
        assert owners & installed, f"{package} imports {module}, which runner-requirements.txt does not bring"


def _instruction(containerfile: str, keyword: str) -> list[str]:
    lines = [line for line in (IMAGES_DIR / containerfile).read_text().splitlines() if line.startswith(keyword + " ")]
    value: list[str] = json.loads(lines[-1][len(keyword) + 1:])
    return value


def test_the_runner_entrypoint_is_the_job_builders_command() -> None:
    assert _instruction("runner.Containerfile", "ENTRYPOINT") == list(StepPodSettings().command)


def test_the_operator_entrypoint_is_the_projects_towline_command() -> None:
    scripts = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert _instruction("towline.Containerfile", "ENTRYPOINT") == ["towline"]
    assert "towline" in scripts
    assert _instruction("towline.Containerfile", "CMD") == ["operator"]


def test_both_images_run_as_the_unprivileged_uid_the_pods_expect() -> None:
    for containerfile in ("towline.Containerfile", "runner.Containerfile"):
        users = [line for line in (IMAGES_DIR / containerfile).read_text().splitlines() if line.startswith("USER ")]
        assert users == [f"USER {StepPodSettings().run_as_user}:{StepPodSettings().run_as_user}"]
