"""`python -m tests.integration.archive.api_server_process`: the archive's read API as the archive process serves
it (towline.archive.apiserver.ArchiveApiServer, authenticated to the API server as the given kubeconfig), over an
archive in memory loaded from a JSON file (tests/archivereader.py). Runs until SIGTERM."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
from pathlib import Path

from tests.archivereader import MemoryArchive

from towline.archive.apiserver import ApiSettings, ArchiveApiServer
from towline.k8s.client import KubeApi


async def serve(args: argparse.Namespace) -> None:
    kube = await KubeApi.connect(str(args.kubeconfig))
    archive = MemoryArchive.from_json(args.archive.read_text())
    settings = ApiSettings(cert_file=args.cert, key_file=args.key, port=args.port, address=args.address)
    server = await ArchiveApiServer(kube, archive, settings).start()
    stopped = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stopped.set)
    await stopped.wait()
    await server.stop()
    await kube.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    for name in ("kubeconfig", "archive", "cert", "key"):
        parser.add_argument(f"--{name}", type=Path, required=True)
    parser.add_argument("--address", required=True)
    parser.add_argument("--port", type=int, required=True)
    logging.basicConfig(level=logging.INFO)
    asyncio.run(serve(parser.parse_args()))


if __name__ == "__main__":
    main()
