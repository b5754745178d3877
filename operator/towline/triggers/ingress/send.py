"""`towline webhook send`: sign a delivery the way the sender would and POST it (for trying a trigger).

The secret comes from a file or an environment variable, never from the
command line (where `ps` and shell history would show it).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import uuid
from pathlib import Path

from towline.triggers.ingress import sign
from towline_connectors.httpxlib import httpx


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="towline webhook send", description=__doc__)
    parser.add_argument("url", help="http(s)://INGRESS/hooks/NAMESPACE/WORKFLOW/TRIGGER")
    parser.add_argument("--scheme", choices=["github", "standard-webhooks", "hmac", "bearer", "gitlab", "slack",
                                             "stripe", "shopify", "none"], default="standard-webhooks")
    parser.add_argument("--secret-file", type=Path, help="file holding the signing secret (or token)")
    parser.add_argument("--secret-env", default="TOWLINE_WEBHOOK_SECRET",
                        help="environment variable holding it when no file is given (default: %(default)s)")
    parser.add_argument("--data", default="{}", help="the JSON body, or @FILE")
    parser.add_argument("--id", default=None, help="delivery id (default: a new one); resend one to see dedup "
                        "(stripe and slack: the body's id / event_id names the delivery instead)")
    parser.add_argument("--content-type", default="application/json",
                        help="the body's media type, e.g. application/x-www-form-urlencoded for a Slack slash command")
    return parser


def send_main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    body = Path(args.data[1:]).read_bytes() if args.data.startswith("@") else args.data.encode()
    secret = ""
    if args.scheme != "none":
        secret = args.secret_file.read_text().strip() if args.secret_file else os.environ.get(args.secret_env, "")
        if not secret:
            print(f"error: give --secret-file or set ${args.secret_env}", file=sys.stderr)
            return 2
    delivery = args.id or f"msg_{uuid.uuid4().hex}"
    now = int(time.time())
    headers = {"Content-Type": args.content_type}
    if args.scheme == "github":
        headers |= sign.github_headers(secret.encode(), body, delivery)
    elif args.scheme == "standard-webhooks":
        headers |= sign.standard_webhooks_headers(secret, delivery, now, body)
    elif args.scheme == "hmac":
        headers |= sign.hmac_headers(secret.encode(), now, body)
    elif args.scheme == "bearer":
        headers |= sign.bearer_headers(secret)
    elif args.scheme == "gitlab":
        headers |= sign.gitlab_headers(secret, delivery)
    elif args.scheme == "slack":
        headers |= sign.slack_headers(secret.encode(), now, body)
    elif args.scheme == "stripe":
        headers |= sign.stripe_headers([secret.encode()], now, body)
    elif args.scheme == "shopify":
        headers |= sign.shopify_headers(secret.encode(), body, delivery)
    response = httpx.post(args.url, content=body, headers=headers, timeout=30)
    print(f"{response.status_code} {response.text}")
    return 0 if response.status_code < 300 else 1
