"""The console blocks of a Markdown document read back as commands and their output, placeholders
substituted, and one bash that keeps what a command set for the next, as the README walkthrough test
(tests/integration/helm/test_readme_walkthrough.py) uses them."""

from __future__ import annotations

from pathlib import Path

import pytest

from towline_dev.consoleblocks import (
    BashSession,
    Command,
    CommandTimedOut,
    console_blocks,
    parse_console,
    substitute,
)

DOCUMENT = """\
# Title

## Install

Text with `$ not a command`.

```console
$ first --flag \\
    --more value
first's output
  indented output

$ second
```

```yaml
# not a heading
key: value
```

### Check

```console
$ helm test x
```

## Other

```console
$ never
```
"""

README = Path(__file__).resolve().parents[3] / "README.md"


def test_commands_with_continuations_and_their_output_under_the_nearest_heading() -> None:
    blocks = console_blocks(DOCUMENT, ["Install"])
    assert [(b.heading, b.line) for b in blocks] == [("Install", 7), ("Check", 23)]
    assert blocks[0].commands == (
        Command("first --flag \\\n    --more value", ("first's output", "  indented output"), 8),
        Command("second", (), 13),
    )
    assert blocks[1].commands == (Command("helm test x", (), 24),)


def test_sections_come_in_the_order_asked_and_end_at_the_next_heading_of_their_level() -> None:
    texts = [c.text for b in console_blocks(DOCUMENT, ["Other", "Check"]) for c in b.commands]
    assert texts == ["never", "helm test x"]


def test_a_missing_section_an_unclosed_block_and_stray_output_are_errors() -> None:
    with pytest.raises(ValueError, match="no heading 'Nope'"):
        console_blocks(DOCUMENT, ["Nope"])
    with pytest.raises(ValueError, match="never closed"):
        console_blocks("## A\n```console\n$ x\n", ["A"])
    with pytest.raises(ValueError, match="output before any"):
        parse_console(["output", "$ x"])
    with pytest.raises(ValueError, match="ends with"):
        parse_console(["$ x \\"])


def test_placeholders_are_replaced_only_where_they_stand_alone() -> None:
    text = ("--docker-server=registry.example.com --docker-username=USER --docker-password=PASSWORD "
            "docker://registry.example.com/towline:0.1.0 $USER USERNAME PASSWORD_FILE my-registry.example.com")
    assert substitute(text, {"registry.example.com": "10.0.0.1:5000/p", "USER": "u", "PASSWORD": "pw"}) == (
        "--docker-server=10.0.0.1:5000/p --docker-username=u --docker-password=pw "
        "docker://10.0.0.1:5000/p/towline:0.1.0 $USER USERNAME PASSWORD_FILE my-registry.example.com")


def test_the_readme_walkthrough_reads_as_the_commands_a_platform_engineer_types() -> None:
    sections = ["Install on your own cluster", "Your first workflow", "Trigger it by webhook", "Upgrade", "Uninstall"]
    commands = [c for b in console_blocks(README.read_text(), sections) for c in b.commands]
    texts = [c.text for c in commands]
    assert texts[0].startswith("skopeo copy oci-archive:dist/towline-0.1.0.oci.tar docker://registry.example.com/")
    assert any(t.startswith("RUN=$(kubectl") for t in texts)
    assert "kill $!" in texts
    assert texts[-1].startswith("kubectl delete crd ")
    applied = next(c for c in commands if c.text.endswith("apply -f examples/hello-towline.yaml"))
    assert applied.output == ("workflow.towline.dev/hello-towline created",)
    sent = [c for c in commands if c.text.startswith("towline webhook send")]
    assert [c.output[0][:4] for c in sent] == ["202 ", "200 "]
    assert all("\\\n" in c.text for c in sent)


def test_the_shell_keeps_variables_and_background_jobs_between_commands(tmp_path: Path) -> None:
    with BashSession(cwd=tmp_path, env={"PATH": "/usr/bin:/bin"}, work=tmp_path / "shell") as shell:
        assert shell.run("NAME=$(echo run-1)", timeout=10).returncode == 0
        ran = shell.run("echo \"$NAME\" \\\n  again; echo oops >&2", timeout=10)
        assert (ran.returncode, ran.stdout, ran.stderr) == (0, "run-1 again\n", "oops\n")
        assert shell.run("sleep 60 >/dev/null & echo started", timeout=10).stdout == "started\n"
        assert shell.run("kill $! && wait $!", timeout=10).returncode == 143  # the job ended by SIGTERM
        assert shell.run("false | true", timeout=10).returncode == 1  # pipefail
        assert shell.run("cat", timeout=10).stdout == ""  # stdin is not the script
        assert shell.run("exit_status() { return 3; }; exit_status", timeout=10).returncode == 3
        with pytest.raises(CommandTimedOut, match="still running"):
            shell.run("sleep 5", timeout=0.5)
