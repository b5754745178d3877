"""`notify.email`: send a message over SMTP (STARTTLS, implicit TLS, or a trusted plain relay).

The SMTP host goes through the same SSRF guard as HTTP: resolved once, every
address validated, the socket opened to a validated address while TLS checks
the certificate against the host name. STARTTLS is never silently skipped, and
a password is never sent over an unencrypted connection. This module must
never put the password, or the login exchange, into a message.
"""

from __future__ import annotations

import email.policy
import email.utils
import hashlib
import smtplib
import socket
import ssl
from email.message import EmailMessage
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, model_validator

from towline_connectors.context import ActionContext
from towline_connectors.errors import ActionError, ErrorClass
from towline_connectors.models import PASSWORD_KEY, USERNAME_KEY, InputModel, OutputModel, UserPassRef
from towline_connectors.netguard import DestinationRefusedError, NetGuard, ResolutionError
from towline_connectors.runtime import run_blocking
from towline_connectors.spec import ActionResult, ActionSpec, CredentialRequirement, Destination, Inputs, RetryDefaults
from towline_connectors.wire import is_template

Security = Literal["starttls", "tls", "none"]
DEFAULT_PORTS: dict[str, int] = {"starttls": 587, "tls": 465, "none": 25}


def _check_address(value: str) -> str:
    if is_template(value):
        return value
    _name, address = email.utils.parseaddr(value)
    if "\r" in value or "\n" in value or "@" not in address or " " in address:
        raise ValueError(f"{value!r} is not an email address")
    return value


EmailAddress = Annotated[str, AfterValidator(_check_address)]


class EmailInput(InputModel):
    """`with:` of notify.email."""

    host: str = Field(min_length=1, description="SMTP server host name.")
    port: int | None = Field(default=None, ge=1, le=65535, description="Default: 587 starttls, 465 tls, 25 none.")
    security: Security = "starttls"
    from_address: EmailAddress = Field(alias="from")
    to: list[EmailAddress] = Field(min_length=1)
    cc: list[EmailAddress] = Field(default_factory=list)
    bcc: list[EmailAddress] = Field(default_factory=list)
    reply_to: EmailAddress | None = None
    subject: str = Field(max_length=998, pattern=r"^[^\r\n]*$")
    text: str
    html: str | None = None
    auth: UserPassRef | None = Field(default=None, description="Credential with username and password keys.")
    helo_name: str | None = Field(default=None, description="Name sent in EHLO; default: the sender's domain.")
    timeout_seconds: float = Field(default=30.0, gt=0, le=300)

    @model_validator(mode="after")
    def _no_cleartext_password(self) -> EmailInput:
        if self.auth is not None and self.security == "none":
            raise ValueError("auth over an unencrypted connection is refused; use security: starttls or tls")
        return self


class EmailOutput(OutputModel):
    message_id: str
    accepted: list[str]
    refused: dict[str, str]


class _GuardedSMTP(smtplib.SMTP):
    """smtplib's client, but the socket goes to an address the guard validated."""

    def __init__(self, guard: NetGuard, *, local_hostname: str, timeout: float) -> None:
        self.guard = guard
        super().__init__(local_hostname=local_hostname, timeout=timeout)

    def _get_socket(self, host: str, port: int, timeout: float) -> socket.socket:
        self._host = host  # smtplib verifies the STARTTLS certificate against this name
        failures: list[str] = []
        for address in self.guard.resolve(host, port):
            try:
                return socket.create_connection((str(address), port), timeout)
            except OSError as exc:
                failures.append(f"{address}: {exc}")
        raise ConnectionError(f"could not connect to {host}:{port} ({'; '.join(failures)})")


class _GuardedSMTPSSL(smtplib.SMTP_SSL, _GuardedSMTP):
    """Implicit TLS: SMTP_SSL wraps the socket _GuardedSMTP opened, checking the host name."""

    def __init__(self, guard: NetGuard, *, local_hostname: str, timeout: float, context: ssl.SSLContext) -> None:
        self.guard = guard
        # SMTP_SSL calls SMTP.__init__ directly, skipping _GuardedSMTP.__init__.
        smtplib.SMTP_SSL.__init__(self, local_hostname=local_hostname, timeout=timeout, context=context)


def build_message(inputs: EmailInput, message_id: str, now: float) -> EmailMessage:
    message = EmailMessage(policy=email.policy.SMTP)
    message["From"] = inputs.from_address
    message["To"] = ", ".join(inputs.to)
    if inputs.cc:
        message["Cc"] = ", ".join(inputs.cc)
    if inputs.reply_to:
        message["Reply-To"] = inputs.reply_to
    message["Subject"] = inputs.subject
    message["Date"] = email.utils.formatdate(now, usegmt=True)
    message["Message-ID"] = message_id
    message.set_content(inputs.text)
    if inputs.html is not None:
        message.add_alternative(inputs.html, subtype="html")
    return message


def message_id_for(idempotency_key: str, sender: str) -> str:
    """Stable across retries, so receivers that dedupe on Message-ID can drop a replay."""
    domain = sender.rpartition("@")[2] or "towline.invalid"
    return f"<towline.{hashlib.sha256(idempotency_key.encode()).hexdigest()[:32]}@{domain}>"


def _reply_error(code: int, reply: bytes | str, stage: str) -> ActionError:
    text = reply.decode("utf-8", "replace") if isinstance(reply, bytes) else reply
    error_class = ErrorClass.TRANSIENT if 400 <= code < 500 else ErrorClass.PERMANENT
    return ActionError(error_class, f"SMTP server refused {stage}: {code} {text}")


def _deliver(inputs: EmailInput, ctx: ActionContext, message: EmailMessage) -> tuple[list[str], dict[str, str]]:
    """The SMTP conversation; blocking, so the caller runs it in a thread."""
    sender = email.utils.parseaddr(inputs.from_address)[1]
    recipients = [email.utils.parseaddr(r)[1] for r in (*inputs.to, *inputs.cc, *inputs.bcc)]
    helo = inputs.helo_name or sender.rpartition("@")[2] or "towline.invalid"
    timeout = ctx.deadline.clamp(inputs.timeout_seconds)
    client: _GuardedSMTP = (
        _GuardedSMTPSSL(ctx.guard, local_hostname=helo, timeout=timeout, context=ctx.ssl_context)
        if inputs.security == "tls"
        else _GuardedSMTP(ctx.guard, local_hostname=helo, timeout=timeout)
    )
    try:
        code, reply = client.connect(inputs.host, inputs.port or DEFAULT_PORTS[inputs.security])
        if code != 220:
            raise _reply_error(code, reply, "the connection")
        client.ehlo()
        if inputs.security == "starttls":
            if not client.has_extn("starttls"):
                raise ActionError(
                    ErrorClass.PERMANENT,
                    f"SMTP server {inputs.host} does not offer STARTTLS; refusing to send in cleartext "
                    f"(use security: tls, or none for a trusted relay without auth)",
                )
            client.starttls(context=ctx.ssl_context)
            client.ehlo()
        if inputs.auth is not None:
            client.login(ctx.secret(inputs.auth.username), ctx.secret(inputs.auth.password))
        mail_options = ["SMTPUTF8"] if not all(a.isascii() for a in (sender, *recipients)) else []
        code, reply = client.mail(sender, mail_options)
        if code != 250:
            raise _reply_error(code, reply, "the sender")
        refused: dict[str, str] = {}
        for recipient in recipients:
            code, reply = client.rcpt(recipient)
            if code not in (250, 251):
                refused[recipient] = f"{code} {reply.decode('utf-8', 'replace')}"
        if len(refused) == len(recipients):
            worst = max(int(text.split()[0]) for text in refused.values())
            raise _reply_error(worst, "; ".join(f"{r}: {t}" for r, t in refused.items()), "every recipient")
        ctx.side_effects.mark_sent()  # from DATA on, a lost connection may still mean delivered
        code, reply = client.data(message.as_bytes(policy=email.policy.SMTP))
        if code != 250:
            raise _reply_error(code, reply, "the message")
        return [r for r in recipients if r not in refused], refused
    finally:
        _close_quietly(client)


def _close_quietly(client: smtplib.SMTP) -> None:
    """QUIT politely; a failure here must not turn a delivered message into an error."""
    try:
        if client.sock is not None:
            client.quit()
    except (smtplib.SMTPException, OSError):
        pass
    finally:
        client.close()


def classify_smtp_failure(  # noqa: PLR0911 - one rule per failure family reads best as a flat chain
    exc: Exception, *, maybe_delivered: bool, host: str
) -> ActionError:
    """The error class of an SMTP failure that did not come with a usable reply code."""
    if isinstance(exc, DestinationRefusedError):
        return ActionError(ErrorClass.PERMANENT, f"SMTP server: {exc}")
    if isinstance(exc, ResolutionError):
        return ActionError(ErrorClass.TRANSIENT if exc.temporary else ErrorClass.PERMANENT, f"SMTP server: {exc}")
    if isinstance(exc, ssl.SSLCertVerificationError):
        return ActionError(ErrorClass.PERMANENT, f"SMTP server {host}: TLS certificate verification failed ({exc})")
    if isinstance(exc, smtplib.SMTPAuthenticationError):
        return ActionError(
            ErrorClass.AUTH, f"SMTP server {host} rejected the login ({exc.smtp_code}); check the credential"
        )
    if isinstance(exc, smtplib.SMTPResponseException):
        return _reply_error(exc.smtp_code, exc.smtp_error, "the request")
    if isinstance(exc, smtplib.SMTPServerDisconnected | OSError) and maybe_delivered:
        return ActionError(
            ErrorClass.UNKNOWN_SIDE_EFFECT,
            f"SMTP server {host}: the connection failed after the message was sent ({exc}); it may have been "
            f"delivered, so check before replaying it",
        )
    if isinstance(exc, smtplib.SMTPServerDisconnected | OSError) and not isinstance(exc, smtplib.SMTPException):
        return ActionError(ErrorClass.TRANSIENT, f"SMTP server {host}: {type(exc).__name__} ({exc})")
    if isinstance(exc, smtplib.SMTPServerDisconnected):
        return ActionError(ErrorClass.TRANSIENT, f"SMTP server {host} closed the connection ({exc})")
    return ActionError(ErrorClass.PERMANENT, f"SMTP server {host}: {exc}")


async def run_email(inputs: EmailInput, ctx: ActionContext) -> ActionResult:
    sender = email.utils.parseaddr(inputs.from_address)[1]
    message_id = message_id_for(ctx.idempotency_key, sender)
    message = build_message(inputs, message_id, ctx.clock())
    snapshot = ctx.side_effects.snapshot()
    try:
        accepted, refused = await run_blocking(_deliver, inputs, ctx, message)
    except ActionError:
        raise
    except Exception as exc:  # smtplib and ssl raise a wide family; classify_smtp_failure sorts it
        raise classify_smtp_failure(
            exc, maybe_delivered=ctx.side_effects.sent_since(snapshot), host=inputs.host
        ) from exc
    return ActionResult(output=EmailOutput(message_id=message_id, accepted=accepted, refused=refused))


def email_destinations(inputs: Inputs) -> list[Destination]:
    security = inputs.get("security", "starttls")
    port = inputs.get("port")
    if not isinstance(port, int):
        port = DEFAULT_PORTS.get(security, 587) if isinstance(security, str) else 587
    host = inputs.get("host")
    return [Destination(host if isinstance(host, str) and not is_template(host) else None, port)]


SPEC = ActionSpec(
    name="notify.email",
    summary="Send an email over SMTP (STARTTLS or TLS, login from a credential)",
    input_model=EmailInput,
    output_model=EmailOutput,
    run=run_email,
    credential=CredentialRequirement(type="smtp", required_keys=(USERNAME_KEY, PASSWORD_KEY), optional=True),
    default_retry=RetryDefaults(limit=3, base_delay_seconds=5.0, max_delay_seconds=300.0),
    rate_limit_hint="set by the SMTP provider; 4xx replies are retried",
    destinations_for=email_destinations,
)
