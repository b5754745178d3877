"""`kubectl-towline`: argument parsing and dispatch. Installed as a console script, so
`kubectl towline ...` finds it on PATH like any kubectl plugin.

kubectl hands a plugin none of its own global flags, so this one takes
`--kubeconfig`, `--context` and `-n/--namespace` itself (default: $KUBECONFIG,
merged like kubectl merges it, its current context and that context's namespace).
Each command's parser is built by a small function so that new ones slot in;
every command's help ends with examples. Failures are one line on stderr and a
non-zero exit (see `errors`), never a traceback.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from towline.k8s import session
from towline.k8s.client import KubeApi
from towline.k8s.session import kubeconfig_namespace
from towline.plugin import (
    commands,
    deadletters,
    deleting,
    errors,
    filters,
    history,
    livecli,
    output,
    schedules,
    submitting,
    terminal,
    views,
    workflowviews,
)
from towline.plugin.completion import SHELLS, autocomplete, complete_with, completion_script, kubectl_answer
from towline.plugin.manifests import UsageError, parse_params
from towline.plugin.runparsers import Sub, add_run_commands, command, output_flag


class Parser(argparse.ArgumentParser):
    """Usage mistakes print as one line naming the command and where to look, exit 2."""

    def error(self, message: str) -> Any:
        self.exit(2, f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")


def add_list_commands(sub: Sub) -> None:
    runs = command(sub, "runs", "list runs, oldest first", """
kubectl towline runs
kubectl towline runs -A --phase Failed,Cancelled --since 1d
kubectl towline runs --workflow nightly --last 5 -o wide
kubectl towline runs -l towline.dev/workflow=release -o name
kubectl towline runs --phase Running --phase AwaitingApproval -o yaml""")
    runs.add_argument("-A", "--all-namespaces", action="store_true",
                      help="runs of every namespace you may list (adds a NAMESPACE column)")
    runs.add_argument("-l", "--selector", default=None, metavar="SELECTOR",
                      help="label selector, passed to the API server (e.g. towline.dev/workflow=nightly)")
    phase = runs.add_argument("--phase", action="append", default=[], type=_phase_value, metavar="PHASE[,PHASE]",
                              help=f"only runs in these phases (repeatable): {', '.join(filters.PHASES)}")
    complete_with(phase, filters.PHASES)
    runs.add_argument("-w", "--workflow", default=None, help="only runs of this workflow")
    runs.add_argument("--since", type=filters.duration, default=None, metavar="DURATION",
                      help="only runs created within DURATION (e.g. 10m, 2h, 1d)")
    runs.add_argument("--last", type=filters.positive, default=None, metavar="N",
                      help="only the newest N runs (after the other filters)")
    output_flag(runs, "the runs, as a List")

    status = command(sub, "status", "a run's steps: state, attempts, durations, errors, approvers", """
kubectl towline status release-x7k2p
kubectl towline status release-x7k2p -o wide   # with each step's Job
kubectl towline status release-x7k2p -o json | jq .status.phase""")
    status.add_argument("run")
    output_flag(status, "the WorkflowRun")

    describe = command(sub, "describe", "all that is recorded about RUN: params, trigger, step inputs and outputs, "
                       "attempts, approvals and Events", """
kubectl towline describe release-x7k2p
kubectl towline describe release-x7k2p -o yaml   # the run, its Approvals and Events as a List""")
    describe.add_argument("run")
    describe.add_argument("-o", "--output", choices=output.MACHINE_FORMATS, default=None,
                          help="json/yaml: the run, its Approvals and its Events as a List; name: their names")


def add_inspect_commands(sub: Sub) -> None:
    draw = command(sub, "graph", "WORKFLOW or RUN as Mermaid or Graphviz DOT (a run coloured by state)", """
kubectl towline graph release
kubectl towline graph release-x7k2p -o dot | dot -Tsvg > run.svg""")
    draw.add_argument("name")
    draw.add_argument("-o", "--output", choices=("mermaid", "dot"), default="mermaid")
    draw.add_argument("--kind", choices=("auto", "run", "workflow"), default="auto")


def add_authoring_commands(sub: Sub) -> None:
    validate = command(sub, "validate", "check Workflow files offline with the operator's own rules", """
kubectl towline validate workflows/*.yaml""")
    validate.add_argument("files", nargs="+", metavar="FILE")

    catalog = command(sub, "connectors", "the built-in actions and the step types usable here", """
kubectl towline connectors
kubectl towline connectors --json | jq '.actions | keys'""")
    catalog.add_argument("--json", action="store_true", help="their input/output JSON Schemas and declarations")

    export = command(sub, "export", "WORKFLOW as a clean manifest to commit, or a namespace's archive (--archive)", """
kubectl towline export release > workflows/release.yaml
kubectl towline export --archive sales-ops --since 2026-07-01T00:00:00Z > audit.jsonl""")
    export.add_argument("workflow", nargs="?")
    export.add_argument("-o", "--output", choices=("yaml", "json"), default="yaml")
    export.add_argument("--archive", metavar="NAMESPACE",
                        help="the namespace's archived record as JSON lines (kubectl towline verify checks it)")
    export.add_argument("--since", metavar="TIME", help="with --archive: from the last checkpoint before TIME")


def add_archive_commands(sub: Sub) -> None:
    verify = command(sub, "verify", "check an archive export offline, or a live namespace's, with the public key", """
kubectl towline verify audit.jsonl --key archive-public.pem
kubectl towline verify --archive sales-ops --key archive-public.pem""")
    verify.add_argument("file", metavar="FILE", nargs="?", help="an export: kubectl towline export --archive NS")
    verify.add_argument("--archive", metavar="NAMESPACE", help="the namespace's live record, exported and checked here")
    verify.add_argument("--key", required=True, metavar="PEM", help="the archive's Ed25519 public key (PEM)")
    past = command(sub, "history", "archived runs, newest first: who asked, who approved, how each ended", """
kubectl towline history --workflow deploy-prod --since 2026-07-01T00:00:00Z --until 2026-10-01T00:00:00Z
kubectl towline history --approver bob -o wide
kubectl towline history -A --phase Failed -o json""")
    past.add_argument("-A", "--all-namespaces", action="store_true")
    past.add_argument("--workflow")
    past.add_argument("--requester")
    past.add_argument("--approver")
    past.add_argument("--phase", choices=("Succeeded", "Failed", "Cancelled"))
    past.add_argument("--since", metavar="TIME", help="started at or after (RFC 3339)")
    past.add_argument("--until", metavar="TIME", help="started before (RFC 3339)")
    past.add_argument("-l", "--selector", help="label equality, e.g. team=payments")
    past.add_argument("--limit", type=int, default=50, help="runs per page (1-500)")
    past.add_argument("--continue", dest="continue_token", metavar="TOKEN", help="the next page, as printed")
    past.add_argument("-o", "--output", choices=output.FORMATS, default=None)
    get = command(sub, "get", "RUN as an object: the live one, else (or with --archived) the archived record", """
kubectl towline get deploy-20260701-0800
kubectl towline get deploy-20260701-0800 --archived -o json""")
    get.add_argument("run")
    get.add_argument("--archived", action="store_true", help="read the archive even while the run exists")
    get.add_argument("-o", "--output", choices=("yaml", "json"), default="yaml")


def add_tool_commands(sub: Sub) -> None:
    command(sub, "version", "the plugin's version and, if the cluster answers, Kubernetes' and Towline's", """
kubectl towline version""")
    completion = command(sub, "completion", "print the shell completion script for bash, zsh or fish", """
# bash (add to ~/.bashrc)
source <(kubectl towline completion bash)
# zsh (add to ~/.zshrc)
source <(kubectl towline completion zsh)
# fish
kubectl towline completion fish > ~/.config/fish/completions/kubectl-towline.fish""")
    completion.add_argument("shell", choices=SHELLS)
    ui = command(sub, "ui", "a web view of runs and approvals on 127.0.0.1, acting as you (docs/web-view.md)", """
kubectl towline ui --open          # serve on a free port and open the browser
kubectl towline ui --port 8765     # then open the URL it prints (its code works once)""")
    ui.add_argument("--port", type=int, default=0, help="default: any free port")
    ui.add_argument("--open", action="store_true", help="open it in the browser")
    ui.add_argument("--allow-apply", action="store_true",
                    help="let the editor apply Workflows as you (server-side apply); off: it only hands you the YAML")
    ui.add_argument("--operator-namespace", default=deadletters.DEFAULT_OPERATOR_NAMESPACE,
                    help="the namespace Towline's operator runs in, where the events sink keeps its dead letters "
                         "(default: %(default)s)")


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="kubectl towline", description="Start, watch and decide Towline runs.",
                    formatter_class=argparse.RawDescriptionHelpFormatter,
                    epilog="Examples:\n  kubectl towline run release -p env=staging --follow\n"
                           "  kubectl towline runs -A --phase Failed --since 1d\n"
                           "  kubectl towline describe release-x7k2p\n\n"
                           "`kubectl towline COMMAND --help` shows each command's flags and examples.")
    parser.add_argument("--kubeconfig", default=None, help="default: $KUBECONFIG (merged), else ~/.kube/config")
    parser.add_argument("--context", default=None, help="kubeconfig context (default: the current one)")
    parser.add_argument("-n", "--namespace", default=None, help="default: the context's namespace, else default")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add in (add_run_commands, deleting.add_parser, add_list_commands, workflowviews.add_parser,
                schedules.add_parser, deadletters.add_parser, livecli.add_parsers, add_inspect_commands,
                add_authoring_commands, add_archive_commands, add_tool_commands):
        add(sub)
    return parser


def _phase_value(text: str) -> frozenset[str]:
    return frozenset(filters.phases([text]))


def _params(args: argparse.Namespace) -> dict[str, Any]:
    """--param-file, then -p on top of it."""
    return {**(submitting.param_file(args.param_file) if args.param_file else {}), **parse_params(args.param)}


def run_filter(args: argparse.Namespace) -> filters.RunFilter:
    return filters.RunFilter(phases=frozenset().union(*args.phase), workflow=args.workflow, since=args.since,
                             last=args.last)


async def dispatch(args: argparse.Namespace, io: commands.Io) -> int:
    if args.command == "version":
        return await views.version(lambda: KubeApi.connect(args.kubeconfig, args.context), io)
    namespace = args.namespace or kubeconfig_namespace(args.kubeconfig, args.context)
    api = await KubeApi.connect(args.kubeconfig, args.context)
    try:
        calls: dict[str, Any] = {
            "run": lambda: commands.start(
                api, namespace, io, workflow=args.workflow, params=args.params, follow=args.follow,
                wait=args.wait, form=args.output, name=args.name, labels=args.labels,
                dry_run=args.dry_run),
            "resubmit": lambda: commands.resubmit(
                api, namespace, io, args.run, follow=args.follow, dry_run=args.dry_run, form=args.output),
            "submit": lambda: commands.submit(api, namespace, io, args.documents, dry_run=args.dry_run,
                                              form=args.output),
            "runs": lambda: views.list_runs(
                api, None if args.all_namespaces else namespace, io, selector=args.selector,
                narrow=run_filter(args), form=args.output),
            "status": lambda: views.status(api, namespace, io, args.run, args.output),
            "describe": lambda: views.describe(api, namespace, io, args.run, args.output),
            "cancel": lambda: commands.switch(api, namespace, io, args.run, "cancel"),
            "stop": lambda: commands.switch(api, namespace, io, args.run, "stop"),
            "suspend": lambda: commands.switch(api, namespace, io, args.run, "suspend"),
            "resume": lambda: commands.switch(api, namespace, io, args.run, "resume"),
            "retry": lambda: commands.retry(api, namespace, io, args.run, args.follow,
                                            workflow_changed=args.workflow_changed, params=args.params),
            "graph": lambda: commands.draw(
                api, namespace, io, name=args.name, kind=args.kind, form=args.output),
            "export": lambda: (history.export_archive(api, args.archive, io, args.since) if args.archive else
                               commands.export(api, namespace, io, args.workflow, args.output)),
            "history": lambda: history.history(
                api, None if args.all_namespaces else namespace, io, limit=args.limit,
                continue_token=args.continue_token, form=args.output,
                filters={"workflow": args.workflow, "requester": args.requester, "approver": args.approver,
                         "phase": args.phase, "since": args.since, "until": args.until,
                         "labelSelector": args.selector}),
            "get": lambda: _get(api, namespace, io, args),
            "verify": lambda: _verify_live(api, args.archive, io, args.key),
            "connectors": lambda: commands.connectors(api, namespace, io, args.json),
            "ui": lambda: _serve_ui(api, namespace, io, args),
            "workflows": lambda: (
                workflowviews.show(api, namespace, io, args.name, args.output) if args.show else
                workflowviews.list_workflows(api, None if args.all_namespaces else namespace, io, args.output)),
            "schedule": lambda: schedules.switch(api, namespace, io, args),
            "deadletters": lambda: deadletters.run(api, io, args, namespace),
            "delete": lambda: deleting.delete(
                api, None if args.all_namespaces else namespace, io, args, datetime.now(UTC)),
            **livecli.calls(api, namespace, io, args),
        }
        code: int = await calls[args.command]()
        return code
    finally:
        await api.close()


async def _get(api: KubeApi, namespace: str, io: commands.Io, args: argparse.Namespace) -> int:
    if not args.archived:
        run = await session.get_run(api, namespace, args.run)
        if run is not None:
            io.out(output.objects([{**views.RUN_KIND, **run}], args.output, single=True))
            return 0
        io.err(f"run {args.run} is not in the cluster (any more); reading the archive")
    return await history.archived_run(api, namespace, io, args.run, args.output)


async def _verify_live(api: KubeApi, namespace: str, io: commands.Io, key_path: str) -> int:
    try:
        key_pem = Path(key_path).read_bytes()
    except OSError as error:
        io.err(f"error: --key {key_path}: {error.strerror}; pass the archive's public key (PEM)")
        return 2
    return await history.verify_archive(api, namespace, io, key_pem)


async def _serve_ui(api: KubeApi, namespace: str, io: commands.Io, args: argparse.Namespace) -> int:
    from towline.plugin.ui.launch import serve  # noqa: PLC0415 - command-only import (see `main`)

    return await serve(api, namespace, port=args.port, open_browser=args.open, out=io.out,
                       allow_apply=args.allow_apply, operator_namespace=args.operator_namespace)


def usage_problem(args: argparse.Namespace) -> str | None:
    """What is wrong with a command line argparse accepted, if anything; the files and values it names are read
    here, before any cluster call, so a mistake in them needs no kubeconfig to show."""
    if args.command == "export" and bool(args.workflow) == bool(args.archive):
        return "export takes WORKFLOW (a manifest to commit) or --archive NAMESPACE (the record), one of them"
    if args.command in ("run", "resubmit") and args.dry_run and (args.follow or getattr(args, "wait", False)):
        return f"{args.command} --dry-run creates no run to follow or wait for; drop --follow/--wait"
    if args.command == "run" and args.follow and (args.output or args.wait):
        return ("run -o/--output prints the created run, or with --wait the finished one; not with --follow"
                if args.output else "run takes --follow (print progress) or --wait (print only the end), not both")
    if args.command in ("delete", "workflows"):
        return deleting.check(args) if args.command == "delete" else workflowviews.check(args)
    try:
        if args.command == "run":
            args.params, args.labels = _params(args), submitting.labels(args.label)
        if args.command == "retry":
            args.params = parse_params(args.param)
        if args.command == "submit":
            args.documents = submitting.run_files(args.filename)
    except UsageError as error:
        return str(error)
    return None


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    autocomplete(parser)  # answers a shell's completion request and exits; otherwise does nothing
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    io = commands.Io(out=terminal.out, err=terminal.err)
    if args.command == "completion":
        terminal.out(completion_script(args.shell), end="")
        return 0
    if problem := usage_problem(args):
        parser.error(problem)
    if args.command == "verify" and not args.archive:
        # Offline: no cluster, no kubeconfig; the file and the public key are all it reads.
        from towline.plugin.archived import verify_file  # noqa: PLC0415 - command-only import

        if not args.file:
            parser.error("verify needs FILE (an export) or --archive NAMESPACE (a live record)")
        return verify_file(args.file, args.key, terminal.out, terminal.err)
    if args.command == "validate":
        # Command-only imports, here and in `_serve_ui`: the validators load every connector and the CEL
        # library, the web view its server; every other command starts without them.
        from towline.plugin.offline import validate_files  # noqa: PLC0415 - command-only import

        lines, problems = validate_files(args.files)
        for line in lines:
            terminal.out(line)
        if problems:
            terminal.err(f"{problems} problem(s) found")
        return 1 if problems else 0
    return errors.guarded(lambda: asyncio.run(dispatch(args, io)), terminal.err)


def kubectl_complete() -> int:
    """`kubectl_complete-towline ARG... PARTIAL`: what kubectl (1.26+) runs to complete `kubectl towline`."""
    terminal.out(kubectl_answer(build_parser(), sys.argv[1:]), end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
