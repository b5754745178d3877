"""The `towline` command: the operator and the connectors catalogue."""

from __future__ import annotations

import argparse
import logging
import os
import sys


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(prog="towline", description="A GitOps workflow engine inside Kubernetes.")
    commands = parser.add_subparsers(dest="command", required=True)

    operator = commands.add_parser("operator", help="run the operator (kopf) against the current cluster")
    operator.add_argument("--kubeconfig", default=None, help="default: in-cluster, else $KUBECONFIG")
    operator.add_argument("--log-level", default=os.environ.get("TOWLINE_LOG_LEVEL", "info"))

    connectors = commands.add_parser("connectors", help="list the built-in actions (or --json for schemas)")
    connectors.add_argument("rest", nargs=argparse.REMAINDER)

    parsed = parser.parse_args(args)
    if parsed.command == "operator":
        return run_operator(parsed.kubeconfig, parsed.log_level)
    from towline_connectors.catalog import main as catalog_main  # noqa: PLC0415 - subcommand-only import

    return int(catalog_main(parsed.rest))


def run_operator(kubeconfig: str | None, log_level: str) -> int:
    import kopf  # noqa: PLC0415 - keep `towline connectors` fast

    from towline.runtime.config import OperatorConfig  # noqa: PLC0415
    from towline.runtime.wiring import build_registry  # noqa: PLC0415

    logging.basicConfig(
        level=getattr(logging, log_level.upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if log_level.lower() != "debug":
        # kopf logs every watch event it hands over ("Handler ... succeeded"); ours say what happened.
        logging.getLogger("kopf.objects").setLevel(logging.WARNING)
    metrics_port = int(os.environ.get("TOWLINE_METRICS_PORT", "9090"))
    if metrics_port:
        from prometheus_client import start_http_server  # noqa: PLC0415

        start_http_server(metrics_port)
    config = OperatorConfig.from_environment()
    registry = build_registry(config, kubeconfig)
    if kubeconfig:
        os.environ["KUBECONFIG"] = kubeconfig
    kopf.run(registry=registry, clusterwide=True, standalone=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
