"""The parsers of the commands that start and steer runs (run, resubmit, submit, retry, cancel, stop, suspend,
resume), and the helpers every command's parser is built with: a subcommand whose help ends with examples, the
`-o` and `--dry-run` flags. `towline.plugin.cli` assembles them.
"""

from __future__ import annotations

import argparse
from typing import Any

from towline.plugin import output, submitting

Sub = Any  # argparse's _SubParsersAction, which typeshed keeps private


def command(sub: Sub, name: str, summary: str, examples: str) -> argparse.ArgumentParser:
    """A subcommand whose help ends with an Examples section (kept as written)."""
    epilog = "Examples:\n" + "\n".join(f"  {line}" if line else "" for line in examples.strip("\n").splitlines())
    parser: argparse.ArgumentParser = sub.add_parser(
        name, help=summary, description=summary[0].upper() + summary[1:] + ".", epilog=epilog,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    return parser


def output_flag(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument("-o", "--output", choices=output.FORMATS, default=None,
                        help=f"json/yaml: {what} as the API server returns it; name: kind/NAME; wide: more columns")


def dry_run_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dry-run", choices=submitting.DRY_RUNS, default=None,
                        help="client: print what it would send; server: the API server and admission judge it, "
                             "nothing is stored")


def created_run_flags(parser: argparse.ArgumentParser, what: str) -> None:
    """--dry-run, and -o for `what` the command prints of the runs it creates."""
    dry_run_flag(parser)
    parser.add_argument("-o", "--output", choices=output.MACHINE_FORMATS, default=None,
                        help=f"{what} as the API server returns it, or kind/NAME")


def add_run_commands(sub: Sub) -> None:
    run = command(sub, "run", "start a run of WORKFLOW as yourself", """
# start a run and return at once
kubectl towline run release -p env=staging
# params from a file, a name of your choosing and a label; -p wins over the file
kubectl towline run release --param-file params.yaml -p env=prod --name release-2-4 --label tier=gold
# ask the API server (admission included) whether it would accept the run, create nothing
kubectl towline run release -p env=prod --dry-run=server
# start one and print its progress until it ends (exit 0 only if it succeeded)
kubectl towline run nightly --follow
# start one, wait for it to end and print the finished run (its status.outputs among it)
kubectl towline run release --wait -o json
RUN=$(kubectl towline run release -o name)   # workflowrun/NAME, for scripts""")
    run.add_argument("workflow")
    run.add_argument("-p", "--param", action="append", default=[], metavar="NAME=VALUE")
    run.add_argument("--param-file", metavar="FILE", help="params as a YAML or JSON mapping; -p values win over it")
    run.add_argument("--name", default=None, help="the run's name (default: WORKFLOW- and five random characters)")
    run.add_argument("--label", action="append", default=[], metavar="KEY=VALUE", help="a label of the run")
    run.add_argument("-f", "--follow", action="store_true", help="wait and print progress until the run ends")
    run.add_argument("--wait", action="store_true",
                     help="wait until the run ends, then print its phase and outputs (exit 0 only if it succeeded)")
    created_run_flags(run, "the created run (with --wait: the finished one)")

    resubmit = command(sub, "resubmit", "a new run of RUN's Workflow with RUN's params, requested by you", """
kubectl towline resubmit nightly-x7k2p
kubectl towline resubmit nightly-x7k2p --follow""")
    resubmit.add_argument("run")
    resubmit.add_argument("-f", "--follow", action="store_true", help="wait and print progress until the run ends")
    created_run_flags(resubmit, "the created run")

    submit = command(sub, "submit", "create the WorkflowRuns of manifest files as yourself", """
kubectl towline submit -f run.yaml
kubectl towline submit -f runs.yaml --dry-run=server -o name""")
    submit.add_argument("-f", "--filename", action="append", required=True, metavar="FILE",
                        help="a WorkflowRun manifest or several (YAML documents); - reads stdin; repeatable")
    created_run_flags(submit, "each created run")

    retry = command(sub, "retry", "a new run that starts again from RUN's failed steps", """
kubectl towline retry sync-x7k2p
kubectl towline retry sync-x7k2p --follow
# fixed in git: rerun the failed steps under the Workflow now (refused if a succeeded step changed)
kubectl towline retry sync-x7k2p --workflow-changed
kubectl towline retry sync-x7k2p -p env=prod   # steps reading env run again""")
    retry.add_argument("run")
    retry.add_argument("-f", "--follow", action="store_true")
    retry.add_argument("--workflow-changed", action="store_true",
                       help="run the Workflow's current generation, reusing the succeeded steps that are unchanged "
                            "in it (refused naming those that changed)")
    retry.add_argument("-p", "--param", action="append", default=[], metavar="NAME=VALUE",
                       help="a param of the retry over RUN's; succeeded steps reading a changed param run again")

    for verb, text in (("cancel", "cancel a run (final): running steps end, then its finally steps run"),
                       ("stop", "end a run at once without its finally steps or compensations (argo terminate; "
                                "final)"),
                       ("suspend", "start no new step until resumed"),
                       ("resume", "lift a suspension; retry a step paused for credential repair")):
        command(sub, verb, text, f"kubectl towline {verb} release-x7k2p").add_argument("run")
