"""The `towline` command: the operator, the webhook ingress, the archive, the in-cluster web view, the connectors
catalogue and the editor schema."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import logging
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable

    import kopf

    from towline.runtime.clock import Clock

log = logging.getLogger("towline.operator")


def build_parser() -> argparse.ArgumentParser:
    """The `towline` command's parser; `webhook` and `connectors` are listed here and parsed by their own
    (`send.build_parser`, `connectors.offline_parser`)."""
    parser = argparse.ArgumentParser(prog="towline", description="A GitOps workflow engine inside Kubernetes.")
    commands = parser.add_subparsers(dest="command", required=True)

    operator = commands.add_parser("operator", help="run the operator (kopf) against the current cluster")
    operator.add_argument("--kubeconfig", default=None, help="default: in-cluster, else $KUBECONFIG")
    operator.add_argument("--log-level", default=os.environ.get("TOWLINE_LOG_LEVEL", "info"))
    operator.add_argument("--log-format", choices=("text", "json"),
                          default=os.environ.get("TOWLINE_LOG_FORMAT", "text"),
                          help="json: one object per line with namespace/workflow/run/step/attempt context")
    operator.add_argument(
        "--namespace", action="append", dest="namespaces", metavar="NAMESPACE",
        help="watch only this namespace (repeatable); default: $TOWLINE_WATCH_NAMESPACES "
        "(comma-separated), else every namespace",
    )

    ingress = commands.add_parser("ingress", help="run the webhook ingress (signed deliveries -> WorkflowRuns)")
    ingress.add_argument("--kubeconfig", default=None, help="default: in-cluster, else $KUBECONFIG")
    ingress.add_argument("--host", default=os.environ.get("TOWLINE_INGRESS_HOST", "0.0.0.0"))  # noqa: S104
    # A number from the environment is a string default, which argparse reads with the option's own type: a bad
    # value is refused like the option's, naming it (the help names the variable).
    numbers = (
        ("--port", port_number, "TOWLINE_INGRESS_PORT", "8080", "port for webhook deliveries"),
        ("--admin-port", port_number, "TOWLINE_INGRESS_ADMIN_PORT", "9090",
         "port for /healthz, /readyz and /metrics (never served on --port)"),
        ("--max-in-flight", positive_int, "TOWLINE_INGRESS_MAX_IN_FLIGHT", "64",
         "deliveries handled at once, all namespaces together (then 503 Busy)"),
        ("--namespace-in-flight", positive_int, "TOWLINE_INGRESS_NAMESPACE_IN_FLIGHT", "16",
         "deliveries to one namespace handled at once (its share of --max-in-flight)"),
        ("--max-buffered-bytes", positive_int, "TOWLINE_INGRESS_MAX_BUFFERED_BYTES", str(64 * 1024 * 1024),
         "body bytes held in memory at once, all deliveries together (then 503 Busy)"),
        ("--namespace-buffered-bytes", positive_int, "TOWLINE_INGRESS_NAMESPACE_BUFFERED_BYTES",
         str(16 * 1024 * 1024), "body bytes held at once for one namespace's deliveries"),
        ("--min-body-rate", positive_float, "TOWLINE_INGRESS_MIN_BODY_RATE", "8192",
         "bytes a second a body must average after its first second (then 408)"),
        ("--body-timeout", positive_float, "TOWLINE_INGRESS_BODY_TIMEOUT", "10",
         "seconds a request body may take to arrive (then 408)"),
        ("--header-timeout", positive_float, "TOWLINE_INGRESS_HEADER_TIMEOUT", "15",
         "seconds a connection may take to send a complete request head (then closed)"),
    )
    for flag, kind, variable, fallback, what in numbers:
        ingress.add_argument(flag, type=kind, default=os.environ.get(variable, fallback),
                             help=f"{what}; default ${variable}, else {fallback}")
    ingress.add_argument("--log-level", default=os.environ.get("TOWLINE_LOG_LEVEL", "info"))
    ingress.add_argument("--log-format", choices=("text", "json"),
                         default=os.environ.get("TOWLINE_LOG_FORMAT", "text"),
                         help="json: one object per line; either way, signing keys are redacted")

    archive = commands.add_parser(
        "archive", help="run the archive: every run, its approvals and step logs into a hash-chained record")
    archive.add_argument("--kubeconfig", default=None, help="default: in-cluster, else $KUBECONFIG")
    archive.add_argument("--log-level", default=os.environ.get("TOWLINE_LOG_LEVEL", "info"))
    archive.add_argument("--log-format", choices=("text", "json"), default=os.environ.get("TOWLINE_LOG_FORMAT", "text"))

    add_ui_parser(commands)

    schema = commands.add_parser(
        "editor-schema", help="write the JSON Schema editors check Workflow files with (yaml-language-server)")
    schema.add_argument("--out", type=Path, required=True, metavar="FILE", help="write the schema to FILE")
    schema.add_argument("--step-type", type=Path, action="append", default=[], metavar="MANIFEST",
                        help="also check the `with` of these StepTypes/ClusterStepTypes against their inputs")

    # Listed for `towline --help`; their arguments never reach this parser (see run_passthrough).
    commands.add_parser("webhook", help="`webhook send URL`: sign and send a test delivery")
    commands.add_parser("connectors", help="list the built-in actions and the step types of -f FILEs (--json: schemas)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    if args[:1] in (["webhook"], ["connectors"]):
        # These own their options: argparse's REMAINDER would take `connectors --json` for an
        # option of `towline` itself and refuse it, so their arguments are handed over untouched.
        return run_passthrough(args[0], args[1:])
    parsed = parser.parse_args(args)
    if parsed.command == "operator":
        namespaces = parsed.namespaces or watch_namespaces_from(os.environ.get("TOWLINE_WATCH_NAMESPACES", ""))
        return run_operator(parsed.kubeconfig, parsed.log_level, namespaces, parsed.log_format)
    if parsed.command == "archive":
        return run_archive_command(parsed)
    if parsed.command == "editor-schema":
        return write_editor_schema(parsed.out, parsed.step_type)
    if parsed.command == "ui":
        return run_web_view(parsed)
    return run_ingress(parsed)


def positive_int(text: str) -> int:
    """A whole number of at least 1 (argparse type): anything else is refused with what was given."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"give a whole number of at least 1, not {text!r}")
    return value


def port_number(text: str) -> int:
    """A TCP port, 1 to 65535 (argparse type)."""
    value = positive_int(text)
    if value > 65535:
        raise argparse.ArgumentTypeError(f"give a port from 1 to 65535, not {text!r}")
    return value


def positive_float(text: str) -> float:
    """A finite number above 0 (argparse type)."""
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"give a number above 0, not {text!r}")
    return value


def run_passthrough(command: str, rest: list[str]) -> int:
    """`towline webhook send ...` and `towline connectors [-f FILE] [--json]`: their own parsers read `rest`."""
    if command == "webhook":
        if rest[:1] != ["send"]:
            print("usage: towline webhook send URL [--scheme ...] [--secret-file FILE] [--data JSON]", file=sys.stderr)
            return 2
        from towline.triggers.ingress.send import send_main  # noqa: PLC0415 - subcommand-only import

        return send_main(rest[1:])
    from towline.plugin.connectors import offline_main  # noqa: PLC0415 - subcommand-only import

    return offline_main(rest)


def write_editor_schema(out: Path, step_type_manifests: list[Path]) -> int:
    """`towline editor-schema --out FILE [--step-type MANIFEST]...`: the editor schema, with these types' inputs."""
    import yaml  # noqa: PLC0415 - subcommand-only imports

    from towline.validation.editorschema import render, step_type_inputs, workflow_schema  # noqa: PLC0415

    documents = []
    for path in step_type_manifests:
        try:
            documents += list(yaml.safe_load_all(path.read_text(encoding="utf-8")))
        except (OSError, yaml.YAMLError) as error:
            print(f"towline editor-schema: --step-type {path}: {error}; give a StepType or ClusterStepType "
                  "manifest file", file=sys.stderr)
            return 2
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(render(workflow_schema(step_types=step_type_inputs(documents))), encoding="utf-8")
    print(f"wrote {out}")
    return 0


def add_ui_parser(commands: Any) -> None:
    ui = commands.add_parser("ui", help="serve the web view in the cluster, behind OpenID Connect sign-in (ui.enabled)")
    ui.add_argument("--url", required=True, help="where people open the view (ui.url), an https:// origin")
    ui.add_argument("--issuer", required=True, help="the OpenID Connect issuer the API server trusts too")
    ui.add_argument("--client-id", required=True)
    ui.add_argument("--client-secret-file", required=True, help="a file holding the client secret (a mounted Secret)")
    ui.add_argument("--scopes", default="openid email profile groups", help="space-separated; must include openid")
    ui.add_argument("--default-namespace", default="default", help="the namespace of / and of a link naming none")
    ui.add_argument("--operator-namespace", default="towline-system",  # kubectl towline deadletters' default
                    help="where the operator runs and the events sink keeps its dead letters (the chart: its "
                         "release namespace)")
    ui.add_argument("--api-server", default=None, help="default: https://$KUBERNETES_SERVICE_HOST:$..._PORT")
    ui.add_argument("--api-ca-file", default=None, help="the API server's CA (default: the mounted kube-root-ca.crt)")
    ui.add_argument("--provider-ca-file", default=None, help="a CA bundle for the provider's TLS (default: system)")
    ui.add_argument("--idle-minutes", type=positive_float, default="30", help="a session ends after this idle time")
    ui.add_argument("--absolute-hours", type=positive_float, default="8", help="and this long after sign-in")
    ui.add_argument("--allow-apply", action="store_true",
                    help="the editor may apply Workflows as the signed-in person (ui.editor.allowApply)")
    ui.add_argument("--webhook-url", default="",
                    help="the webhook ingress's public origin (ui.webhookUrl): webhooks are shown with their URL")
    ui.add_argument("--host", default="0.0.0.0")  # noqa: S104 - a pod's port, reached through its Service
    ui.add_argument("--port", type=port_number, default="8080")
    ui.add_argument("--log-level", default=os.environ.get("TOWLINE_LOG_LEVEL", "info"))
    ui.add_argument("--log-format", choices=("text", "json"), default=os.environ.get("TOWLINE_LOG_FORMAT", "text"))


def run_web_view(parsed: argparse.Namespace) -> int:
    """`towline ui`: the in-cluster web view (towline.plugin.ui.serving)."""
    import asyncio  # noqa: PLC0415 - keep other subcommands fast

    from towline.logs import configure_logging  # noqa: PLC0415
    from towline.plugin.ui import serving  # noqa: PLC0415

    configure_logging(parsed.log_level, parsed.log_format)
    try:
        settings = serving.ServeSettings(
            url=parsed.url, issuer=parsed.issuer, client_id=parsed.client_id,
            client_secret=serving.read_secret_file(parsed.client_secret_file), scopes=tuple(parsed.scopes.split()),
            default_namespace=parsed.default_namespace, operator_namespace=parsed.operator_namespace,
            api_server=parsed.api_server or serving.in_cluster_api_server(),
            api_ca_file=parsed.api_ca_file or serving.DEFAULT_API_CA, provider_ca_file=parsed.provider_ca_file,
            idle_seconds=parsed.idle_minutes * 60, absolute_seconds=parsed.absolute_hours * 3600,
            allow_apply=parsed.allow_apply, webhook_url=parsed.webhook_url or None)
        serving.check_settings(settings)
    except serving.SettingsError as error:
        print(f"towline ui: {error}", file=sys.stderr)
        return 2
    with contextlib.suppress(asyncio.CancelledError, KeyboardInterrupt):
        asyncio.run(serving.serve(settings, parsed.host, parsed.port))
    return 0


def run_archive_command(parsed: argparse.Namespace) -> int:
    """`towline archive`: settings from the environment the chart sets (towline.archive.app.ArchiveSettings)."""
    import asyncio  # noqa: PLC0415 - keep other subcommands fast

    from towline.archive.app import ArchiveSettings, run_archive  # noqa: PLC0415
    from towline.archive.records import ArchiveError  # noqa: PLC0415
    from towline.logs import configure_logging  # noqa: PLC0415

    configure_logging(parsed.log_level, parsed.log_format)
    try:
        settings = ArchiveSettings.from_environment()
        with contextlib.suppress(asyncio.CancelledError, KeyboardInterrupt):
            asyncio.run(run_archive(parsed.kubeconfig, settings))
    except ArchiveError as error:
        print(f"towline archive: {error}", file=sys.stderr)
        return 2
    return 0


def run_ingress(parsed: argparse.Namespace) -> int:
    from towline.logs import configure_logging  # noqa: PLC0415
    from towline.triggers.ingress.app import IngressSettings  # noqa: PLC0415 - keep other subcommands fast
    from towline.triggers.ingress.server import run_ingress as serve  # noqa: PLC0415

    # The redacting formatter: every signing key the ingress reads is scrubbed from every line.
    configure_logging(parsed.log_level, parsed.log_format)
    return serve(parsed.kubeconfig, parsed.host, parsed.port, IngressSettings(
        max_in_flight=parsed.max_in_flight, namespace_in_flight=parsed.namespace_in_flight,
        max_buffered_bytes=parsed.max_buffered_bytes, namespace_buffered_bytes=parsed.namespace_buffered_bytes,
        min_body_bytes_per_second=parsed.min_body_rate, body_timeout_seconds=parsed.body_timeout,
        header_timeout_seconds=parsed.header_timeout), parsed.admin_port)


def watch_namespaces_from(value: str) -> list[str]:
    """`a, b` -> ["a", "b"]; empty means every namespace (the chart's `watchNamespaces`)."""
    return [name.strip() for name in value.split(",") if name.strip()]


def run_operator(
    kubeconfig: str | None, log_level: str, namespaces: list[str] | None = None, log_format: str = "text",
    *, clock: Clock | None = None, adjust: Callable[[kopf.OperatorSettings], None] | None = None,
) -> int:
    """`clock` (None: the machine's) and `adjust` (kopf's settings): only a harness that imports this
    function passes them (`towline_dev.testoperator`); the command line offers neither."""
    import asyncio  # noqa: PLC0415 - keep `towline connectors` fast

    from towline.logs import configure_logging  # noqa: PLC0415
    from towline.runtime.clock import SYSTEM_CLOCK  # noqa: PLC0415
    from towline.runtime.config import OperatorConfig  # noqa: PLC0415
    from towline.runtime.wiring import build_registry, serve  # noqa: PLC0415

    configure_logging(log_level, log_format)
    if log_level.lower() != "debug":
        # kopf logs every watch event it hands over ("Handler ... succeeded"); ours say what happened.
        logging.getLogger("kopf.objects").setLevel(logging.WARNING)
    metrics_port = int(os.environ.get("TOWLINE_METRICS_PORT", "9090"))
    if metrics_port:
        from prometheus_client import start_http_server  # noqa: PLC0415

        # In a pod every address (the Service scrapes it); tests bind loopback only.
        start_http_server(metrics_port, addr=os.environ.get("TOWLINE_METRICS_ADDRESS", "0.0.0.0"))  # noqa: S104
    config = dataclasses.replace(OperatorConfig.from_environment(), watch_namespaces=tuple(namespaces or ()))
    registry = build_registry(config, kubeconfig, clock=clock or SYSTEM_CLOCK, adjust=adjust)
    if kubeconfig:
        os.environ["KUBECONFIG"] = kubeconfig
    # kopf's liveness endpoint is served by the operator's event loop: a hung loop fails the probe.
    health_port = int(os.environ.get("TOWLINE_HEALTH_PORT", "0"))
    liveness = f"http://0.0.0.0:{health_port}/healthz" if health_port else None
    if namespaces:
        log.info("watching only the namespaces %s", ", ".join(namespaces))
    with contextlib.suppress(asyncio.CancelledError):  # as kopf.run: a cancelled operator has stopped
        asyncio.run(serve(registry, namespaces=namespaces, liveness=liveness))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
