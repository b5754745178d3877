"""The chart's CRD template (charts/towline/templates/crds.yaml) is the generated CRDs, kept up to date by
`make crds`: the documents of crds/ with the chart's labels and the keep annotation, escaped for Helm."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from towline.api import crdgen
from towline_dev import REPO_ROOT, generated
from towline_dev.chartcrds import TEMPLATE_PATH, crd_document, crds_template, escape_template

CHART_TEMPLATE = REPO_ROOT / "charts" / "towline" / TEMPLATE_PATH


def test_the_committed_chart_template_is_up_to_date() -> None:
    assert generated.main(["chart-crds", "--check", str(CHART_TEMPLATE)]) == 0, "run `make crds`"


def test_the_chart_has_no_crds_directory_for_helm_to_install_once_and_never_upgrade() -> None:
    assert not (CHART_TEMPLATE.parents[1] / "crds").exists()


def test_a_stale_template_fails_the_check_naming_the_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    target = tmp_path / "crds.yaml"
    assert generated.main(["chart-crds", "--out", str(target)]) == 0
    assert generated.main(["chart-crds", "--check", str(target)]) == 0
    target.write_text(target.read_text().replace("helm.sh/resource-policy: keep", "helm.sh/resource-policy: no", 1))
    assert generated.main(["chart-crds", "--check", str(target)]) == 1
    assert "run `make crds`" in capsys.readouterr().err


def test_an_expression_in_a_description_is_escaped_so_helm_prints_it() -> None:
    assert escape_template("a ${{ steps.x.output }} b") == 'a ${{ "{{" }} steps.x.output }} b'
    template = crds_template(crdgen.generated_files())
    assert "{{ steps" not in template and '${{ "{{" }}' in template


def test_each_document_is_the_generated_crd_with_the_charts_metadata() -> None:
    for name, text in crdgen.generated_files().items():
        document = crd_document(text)
        # Helm's actions taken out (the metadata lines that hold them) and the escapes undone: the generated CRD.
        plain = "\n".join(line for line in document.replace('{{ "{{" }}', "{{").splitlines()
                          if "{{-" not in line and "helm.sh/resource-policy" not in line and line != "  annotations:")
        assert yaml.safe_load(plain) == yaml.safe_load(text), name
        assert '{{- include "towline.labels" . | nindent 4 }}' in document
        keep = "{{- if .Values.crds.keep }}\n  annotations:\n    helm.sh/resource-policy: keep\n  {{- end }}"
        assert keep in document


def test_the_whole_template_renders_only_when_crds_enabled() -> None:
    template = crds_template(crdgen.generated_files())
    lines = template.splitlines()
    assert lines[2] == "{{- if .Values.crds.enabled }}" and lines[-1] == "{{- end }}"
    assert lines[3] == '{{- include "towline.checkCrdOwner" . }}'
    assert template.count("kind: CustomResourceDefinition") == len(crdgen.generated_files()) == 5
