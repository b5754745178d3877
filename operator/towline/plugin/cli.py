"""`kubectl-towline`: argument parsing and dispatch. Installed as a console script, so
`kubectl towline ...` finds it on PATH like any kubectl plugin.

kubectl hands a plugin none of its own global flags, so this one takes
`--kubeconfig`, `--context` and `-n/--namespace` itself (default: $KUBECONFIG,
its current context and that context's namespace).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any

from towline.k8s.client import ApiError, KubeApi
from towline.k8s.session import kubeconfig_namespace
from towline.plugin import commands, livecli
from towline.plugin.manifests import UsageError, parse_params
from towline.plugin.offline import validate_files
from towline.plugin.ui.launch import serve as serve_ui


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kubectl towline", description="Start, watch and decide Towline runs.")
    parser.add_argument("--kubeconfig", default=None, help="default: $KUBECONFIG, else ~/.kube/config")
    parser.add_argument("--context", default=None, help="kubeconfig context (default: the current one)")
    parser.add_argument("-n", "--namespace", default=None, help="default: the context's namespace, else default")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = sub.add_parser("run", help="start a run of WORKFLOW as yourself")
    run.add_argument("workflow")
    run.add_argument("-p", "--param", action="append", default=[], metavar="NAME=VALUE")
    run.add_argument("-f", "--follow", action="store_true", help="wait and print progress until the run ends")

    runs = sub.add_parser("runs", help="list runs")
    runs.add_argument("-w", "--workflow", default=None, help="only runs of this workflow")

    sub.add_parser("status", help="a run's steps: state, attempts, durations, errors, approvers").add_argument("run")

    livecli.add_parsers(sub)

    for verb, text in (("cancel", "cancel a run (final)"), ("suspend", "start no new step until resumed"),
                       ("resume", "lift a suspension; retry a step paused for credential repair")):
        sub.add_parser(verb, help=text).add_argument("run")

    retry = sub.add_parser("retry", help="a new run that starts again from RUN's failed steps")
    retry.add_argument("run")
    retry.add_argument("-f", "--follow", action="store_true")

    draw = sub.add_parser("graph", help="WORKFLOW or RUN as Mermaid or Graphviz DOT (a run coloured by state)")
    draw.add_argument("name")
    draw.add_argument("-o", "--output", choices=("mermaid", "dot"), default="mermaid")
    draw.add_argument("--kind", choices=("auto", "run", "workflow"), default="auto")

    validate = sub.add_parser("validate", help="check Workflow files offline with the operator's own rules")
    validate.add_argument("files", nargs="+", metavar="FILE")

    catalog = sub.add_parser("connectors", help="the built-in actions and the step types usable here")
    catalog.add_argument("--json", action="store_true", help="their input/output JSON Schemas and declarations")

    export = sub.add_parser("export", help="WORKFLOW as a clean manifest to commit")
    export.add_argument("workflow")
    export.add_argument("-o", "--output", choices=("yaml", "json"), default="yaml")

    ui = sub.add_parser("ui", help="a web view of runs on 127.0.0.1, acting as you (see docs/web-view.md)")
    ui.add_argument("--port", type=int, default=0, help="default: any free port")
    ui.add_argument("--open", action="store_true", help="open it in the browser")
    return parser


def _print_err(text: str) -> None:
    print(text, file=sys.stderr)


async def dispatch(args: argparse.Namespace, io: commands.Io) -> int:
    namespace = args.namespace or kubeconfig_namespace(args.kubeconfig, args.context)
    api = await KubeApi.connect(args.kubeconfig, args.context)
    try:
        calls: dict[str, Any] = {
            "run": lambda: commands.start(
                api, namespace, io, workflow=args.workflow, params=parse_params(args.param), follow=args.follow),
            "runs": lambda: commands.list_runs(api, namespace, io, args.workflow),
            "status": lambda: commands.status(api, namespace, io, args.run),
            "cancel": lambda: commands.switch(api, namespace, io, args.run, "cancel"),
            "suspend": lambda: commands.switch(api, namespace, io, args.run, "suspend"),
            "resume": lambda: commands.switch(api, namespace, io, args.run, "resume"),
            "retry": lambda: commands.retry(api, namespace, io, args.run, args.follow),
            "graph": lambda: commands.draw(
                api, namespace, io, name=args.name, kind=args.kind, form=args.output),
            "export": lambda: commands.export(api, namespace, io, args.workflow, args.output),
            "connectors": lambda: commands.connectors(api, namespace, io, args.json),
            "ui": lambda: serve_ui(api, namespace, port=args.port, open_browser=args.open, out=io.out),
            **livecli.calls(api, namespace, io, args),
        }
        code: int = await calls[args.command]()
        return code
    finally:
        await api.close()


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
    io = commands.Io(out=print, err=_print_err)
    if args.command == "validate":
        lines, problems = validate_files(args.files)
        for line in lines:
            print(line)
        if problems:
            _print_err(f"{problems} problem(s) found")
        return 1 if problems else 0
    try:
        return asyncio.run(dispatch(args, io))
    except (UsageError, commands.NotFound) as error:
        _print_err(f"error: {error}")
        return 2 if isinstance(error, UsageError) else 1
    except ApiError as error:
        _print_err(f"error from the API server ({error.status}): {error.message}")
        return 1
    except KeyboardInterrupt:  # `ui` serves until Ctrl-C
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
