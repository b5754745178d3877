"""`make dev`'s pieces that need no cluster: its helm install is the README's, its demo workflow is valid
and its steps' NetworkPolicy opens the demo API and nothing else."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from towline.k8s.objects import RunRef, build_step_egress_policy, egress_rules
from towline.validation.catalog import connector_catalog
from towline.validation.workflow import validate_workflow_manifest
from towline_dev.demo import DEMO_API_ADDRESS, DEMO_API_PORT, demo_workflow
from towline_dev.release import install_args, local_image_values, printable

README = Path(__file__).resolve().parents[3] / "README.md"


def test_the_dev_install_is_the_readme_install_with_the_local_images() -> None:
    readme = README.read_text()
    (section,) = re.findall(r"\$ helm install towline charts/towline .*?(?=\n\$ kubectl)", readme, re.S)
    keys = re.findall(r"--set (\S+?)=", section)
    assert keys == ["image.repository", "image.tag", "runner.image"]
    argv = install_args(local_image_values())
    assert argv[:6] == ["install", "towline", argv[2], "--namespace", "towline-system", "--create-namespace"]
    assert argv[2].endswith("charts/towline")
    assert [a.split("=", 1)[0] for a in argv[7::2]] == keys
    assert local_image_values() == {"image.repository": "localhost/towline", "image.tag": "dev",
                                    "runner.image": "localhost/towline-runner:dev"}


def test_the_printed_command_quotes_json_values_for_a_shell() -> None:
    printed = printable(["helm", *install_args({"networkPolicy.apiServer.cidrs": '["198.51.100.250/32"]'})])
    assert "--set-json 'networkPolicy.apiServer.cidrs=[\"198.51.100.250/32\"]'" in printed


def test_the_demo_workflow_is_valid() -> None:
    spec, errors = validate_workflow_manifest(demo_workflow()["spec"], connector_catalog())
    assert spec is not None and errors == []


def test_the_demo_steps_may_reach_the_demo_api_and_nothing_else() -> None:
    run = RunRef(name="r", namespace="towline-demo", uid="u", workflow="hello-towline")
    calls = [s for s in demo_workflow()["spec"]["steps"] if s.get("action") == "http.request"]
    assert len(calls) == 2
    for step in calls:
        ports = connector_catalog().connector_ports(step["action"], step["with"])
        hosts = step["allowHosts"]
        rules = egress_rules(egress=[], connector_ports=ports, allow_hosts=hosts)
        policy = build_step_egress_policy(run, name="p", step_id=step["id"], rules=rules, allow_hosts=hosts)
        # allowHosts are IP addresses, so the step resolves no name and gets no DNS either.
        [api] = policy["spec"]["egress"]
        assert api == {"to": [{"ipBlock": {"cidr": f"{DEMO_API_ADDRESS}/32"}}],
                       "ports": [{"protocol": "TCP", "port": DEMO_API_PORT}]}


def test_make_dev_imports_no_stand_in_node_and_no_process_operator() -> None:
    # A fresh interpreter: what `python -m towline_dev` loads, not what this test session already has.
    probe = ("import sys, towline_dev.devenv, towline_dev.cli; "
             "print(' '.join(sorted(m for m in sys.modules if m.startswith('towline_dev.'))))")
    loaded = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True,
                            timeout=60).stdout.split()
    assert "towline_dev.node.realnode" in loaded
    stand_ins = {"stepexecutor", "podrunner", "podspec", "podvolumes", "podbootstrap", "install", "ingress"}
    assert [m for m in loaded if m.split(".")[1] in stand_ins] == []
