"""A minimal SMTP server on 127.0.0.1 for the notify.email tests.

Speaks just enough ESMTP for smtplib: EHLO/HELO, STARTTLS, AUTH PLAIN/LOGIN,
MAIL, RCPT, DATA, RSET, NOOP, QUIT. It records every accepted message.
"""

from __future__ import annotations

import base64
import contextlib
import socket
import socketserver
import ssl
import threading
from dataclasses import dataclass, field
from typing import BinaryIO


@dataclass
class ReceivedMail:
    sender: str
    recipients: list[str]
    data: bytes
    user: str | None
    tls: bool


@dataclass
class SMTPBehaviour:
    users: dict[str, str] = field(default_factory=dict)
    offer_starttls: bool = True
    refuse_recipients: dict[str, str] = field(default_factory=dict)  # address -> "550 no such user"
    drop_after_data: bool = False


class _Session:
    def __init__(self, owner: LoopbackSMTPServer, conn: socket.socket) -> None:
        self.owner = owner
        self.conn = conn
        self.tls = owner.implicit_tls is not None
        if owner.implicit_tls is not None:
            self.conn = owner.implicit_tls.wrap_socket(conn, server_side=True)
        self.rfile: BinaryIO = self.conn.makefile("rb")
        self.user: str | None = None
        self.sender: str | None = None
        self.recipients: list[str] = []

    def close(self) -> None:
        self.rfile.close()
        self.conn.close()

    def send(self, line: str) -> None:
        self.conn.sendall(line.encode() + b"\r\n")

    def readline(self) -> str | None:
        raw = self.rfile.readline()
        return raw.decode("utf-8", "replace").rstrip("\r\n") if raw else None

    def run(self) -> None:
        self.send("220 loopback ESMTP test server")
        while (line := self.readline()) is not None:
            verb, _, arg = line.partition(" ")
            handler = getattr(self, f"cmd_{verb.upper()}", None)
            if handler is None:
                self.send("502 command not implemented")
            elif handler(arg) is False:
                return

    def cmd_EHLO(self, arg: str) -> None:
        behaviour = self.owner.behaviour
        lines = ["250-loopback", "250-8BITMIME", "250-SMTPUTF8"]
        if behaviour.offer_starttls and not self.tls and self.owner.starttls is not None:
            lines.append("250-STARTTLS")
        if behaviour.users and self.tls:
            lines.append("250-AUTH PLAIN LOGIN")
        lines.append("250 SIZE 1000000")
        for line in lines:
            self.send(line)

    def cmd_HELO(self, arg: str) -> None:
        self.send("250 loopback")

    def cmd_STARTTLS(self, arg: str) -> None:
        assert self.owner.starttls is not None
        self.send("220 ready to start TLS")
        self.rfile.close()
        self.conn = self.owner.starttls.wrap_socket(self.conn, server_side=True)
        self.rfile = self.conn.makefile("rb")
        self.tls = True

    def cmd_AUTH(self, arg: str) -> None:
        mechanism, _, initial = arg.partition(" ")
        if mechanism.upper() == "PLAIN":
            if not initial:
                self.send("334 ")
                initial = self.readline() or ""
            _, user, password = base64.b64decode(initial).decode().split("\0")
        else:
            self.send("334 VXNlcm5hbWU6")
            user = base64.b64decode(self.readline() or "").decode()
            self.send("334 UGFzc3dvcmQ6")
            password = base64.b64decode(self.readline() or "").decode()
        if self.owner.behaviour.users.get(user) == password:
            self.user = user
            self.send("235 2.7.0 authenticated")
        else:
            self.send("535 5.7.8 authentication credentials invalid")

    def cmd_MAIL(self, arg: str) -> None:
        self.sender = arg.split(":", 1)[1].split(maxsplit=1)[0].strip("<>")
        self.recipients = []
        self.send("250 sender ok")

    def cmd_RCPT(self, arg: str) -> None:
        address = arg.split(":", 1)[1].split(maxsplit=1)[0].strip("<>")
        refusal = self.owner.behaviour.refuse_recipients.get(address)
        if refusal:
            self.send(refusal)
            return
        self.recipients.append(address)
        self.send("250 recipient ok")

    def cmd_DATA(self, arg: str) -> bool | None:
        self.send("354 end with <CRLF>.<CRLF>")
        lines: list[bytes] = []
        while (raw := self.rfile.readline()) not in (b".\r\n", b""):
            lines.append(raw[1:] if raw.startswith(b"..") else raw)
        if self.owner.behaviour.drop_after_data:
            self.conn.shutdown(socket.SHUT_RDWR)
            return False
        self.owner.received.append(
            ReceivedMail(self.sender or "", list(self.recipients), b"".join(lines), self.user, self.tls)
        )
        self.send("250 queued")
        return None

    def cmd_RSET(self, arg: str) -> None:
        self.sender, self.recipients = None, []
        self.send("250 ok")

    def cmd_NOOP(self, arg: str) -> None:
        self.send("250 ok")

    def cmd_QUIT(self, arg: str) -> bool:
        self.send("221 bye")
        return False


class _Handler(socketserver.BaseRequestHandler):
    server: _OwnedServer

    def handle(self) -> None:
        session: _Session | None = None
        with contextlib.suppress(OSError, ssl.SSLError, ValueError):  # clients hang up mid-session on purpose
            session = _Session(self.server.owner, self.request)
            session.run()
        if session is not None:
            session.close()


class _OwnedServer(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True
    owner: LoopbackSMTPServer


class LoopbackSMTPServer:
    def __init__(
        self,
        behaviour: SMTPBehaviour | None = None,
        *,
        starttls: ssl.SSLContext | None = None,
        implicit_tls: ssl.SSLContext | None = None,
    ) -> None:
        self.behaviour = behaviour or SMTPBehaviour()
        self.starttls = starttls
        self.implicit_tls = implicit_tls
        self.received: list[ReceivedMail] = []
        self._server = _OwnedServer(("127.0.0.1", 0), _Handler)
        self._server.owner = self
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
