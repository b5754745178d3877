"""The webhook ingress's trigger kinds: signed HTTP deliveries (`webhook`) and CloudEvents (`cloudEvent`).

What a Workflow's author declares about outside senders: how a delivery is
authenticated, what of it may enter a run (CEL `filter` and `data`), and the
limits the ingress holds it to. The ingress and the operator both read these.
"""

from __future__ import annotations

from typing import Annotated, Literal, get_args

from pydantic import ConfigDict, Field

from towline.api.common import Identifier, SecretKeyRef, TowlineModel, cel_rule, cel_rules

WebhookScheme = Literal["github", "standard-webhooks", "hmac", "bearer", "gitlab", "slack", "stripe", "shopify",
                        "none"]

HTTP_HEADER_PATTERN = r"^[A-Za-z0-9!#$%&'*+.^_`|~-]{1,64}$"
"""An HTTP header name (RFC 9110 token)."""

WebhookContentType = Literal["application/json", "application/x-www-form-urlencoded", "text/plain"]

# The delivery limits webhook and cloudEvent triggers share (CloudEventTrigger.as_webhook), with their defaults.
BodyBytes = Annotated[int, Field(ge=1, le=10_485_760, description="The largest body accepted; larger answers 413.")]
BODY_BYTES_DEFAULT = 1_048_576
DataBytes = Annotated[
    int, Field(ge=1, le=65_536, description="Cap on the JSON size of trigger.data; larger answers 422."),
]
DATA_BYTES_DEFAULT = 8192


class WebhookVerification(TowlineModel):
    """How the webhook ingress proves a delivery came from the sender: a bad signature is a 401."""

    model_config = ConfigDict(
        json_schema_extra=cel_rules(
            cel_rule(
                "self.scheme == 'none' || has(self.secretRef) || "
                "(self.scheme == 'standard-webhooks' && has(self.publicKeyRef))",
                "a signed scheme needs secretRef: {name, key} naming the Secret that holds the signing secret "
                "(standard-webhooks may use publicKeyRef for ed25519)",
            ),
            cel_rule(
                "self.scheme != 'none' || (has(self.allowUnsigned) && self.allowUnsigned)",
                "scheme none accepts anyone's requests; set allowUnsigned: true to mean it, "
                "or use a signed scheme (github, standard-webhooks, hmac, bearer, gitlab, slack, stripe, shopify) "
                "with a secretRef",
                field_path=".allowUnsigned",
            ),
        )
    )

    scheme: WebhookScheme = Field(
        description="github (X-Hub-Signature-256), standard-webhooks (v1 HMAC or v1a ed25519), hmac "
        "(HMAC-SHA256 over `<timestamp>.<body>`), bearer (a static token), gitlab (X-Gitlab-Token), slack "
        "(X-Slack-Signature over `v0:<timestamp>:<body>`), stripe (Stripe-Signature t=...,v1=...), shopify "
        "(X-Shopify-Hmac-Sha256, base64), or none (with allowUnsigned).",
    )
    secret_ref: SecretKeyRef | None = Field(
        default=None,
        description="The Secret key holding the signing secret (for bearer and gitlab, the token).",
    )
    public_key_ref: SecretKeyRef | None = Field(
        default=None, description="standard-webhooks only: the Secret key holding the sender's ed25519 public key.",
    )
    tolerance_seconds: int = Field(
        default=300, ge=1, le=3600,
        description="How far a signed timestamp may lie in the past or the future.",
    )
    allow_unsigned: bool = Field(default=False, description="Required to accept scheme none.")
    signature_header: str = Field(
        default="X-Signature", pattern=HTTP_HEADER_PATTERN, max_length=64,
        description="hmac: the header holding the hex HMAC-SHA256 (an optional sha256= prefix is accepted).",
    )
    timestamp_header: str = Field(
        default="X-Timestamp", pattern=HTTP_HEADER_PATTERN, max_length=64,
        description="hmac: the header holding the Unix timestamp that is signed with the body.",
    )


class DeliveryId(TowlineModel):
    """Where a sender puts the id it keeps across redeliveries: exactly one of header or field."""

    model_config = ConfigDict(
        json_schema_extra=cel_rules(
            cel_rule("has(self.header) != has(self.field)", "deliveryId needs exactly one of header or field"),
        )
    )

    header: str | None = Field(
        default=None, pattern=HTTP_HEADER_PATTERN, max_length=64, description="An HTTP header, e.g. X-Request-Id.",
    )
    field: str | None = Field(
        default=None, max_length=256, pattern=r"^[A-Za-z_][A-Za-z0-9_-]*(\.[A-Za-z_][A-Za-z0-9_-]*)*$",
        description="A dotted path into the JSON body, e.g. data.id.",
    )


class WebhookTrigger(TowlineModel):
    """Start runs from signed HTTP deliveries to the webhook ingress."""

    verify: WebhookVerification = Field(description="How a delivery is authenticated; a bad signature answers 401.")
    max_body_bytes: BodyBytes = BODY_BYTES_DEFAULT
    rate_limit_per_minute: int = Field(
        default=60, ge=1, le=100_000,
        description="Verified deliveries accepted per minute (a burst of this many); more answer 429.",
    )
    content_types: list[Annotated[WebhookContentType, Field(description="A media type.")]] = Field(
        default_factory=lambda: list[WebhookContentType](["application/json"]), min_length=1, max_length=3,
        description="Media types accepted (application/json, application/x-www-form-urlencoded, text/plain); "
        "anything else answers 415. Defaults to [application/json].",
    )
    delivery_id: DeliveryId | None = Field(
        default=None,
        description="Where the delivery id is (default: X-GitHub-Delivery or webhook-id); a redelivery "
        "with the same id answers with the existing run. Without one, a hash of the signed content.",
    )
    data: dict[Identifier, Annotated[str, Field(max_length=1024, description="A CEL expression.")]] = Field(
        default_factory=dict, max_length=32,
        description="trigger.data key -> CEL over `body` (the parsed payload) and `headers` (lower-case "
        "names); only these enter the run.",
    )
    filter: str | None = Field(
        default=None, max_length=1024,
        description="A CEL condition over `body` and `headers`; false answers 202 filtered and starts nothing.",
    )
    max_data_bytes: DataBytes = DATA_BYTES_DEFAULT


CloudEventScheme = Literal["standard-webhooks", "hmac", "bearer", "none"]
"""The schemes a CloudEvents sender can use: the general ones (the providers' own schemes sign their own
payloads, never a CloudEvent)."""
CLOUD_EVENT_SCHEMES: tuple[CloudEventScheme, ...] = get_args(CloudEventScheme)
MAX_EVENT_TYPE = 256
MAX_EVENT_SOURCE = 1024

EventType = Annotated[str, Field(min_length=1, max_length=MAX_EVENT_TYPE,
                                 description="A CloudEvents type, matched exactly, e.g. com.example.order.paid.")]
EventSource = Annotated[str, Field(min_length=1, max_length=MAX_EVENT_SOURCE,
                                   description="A CloudEvents source (a URI-reference), matched exactly.")]


class CloudEventTrigger(TowlineModel):
    """Start runs from CloudEvents (HTTP binding, structured or binary mode, JSON data) sent to the ingress."""

    model_config = ConfigDict(
        json_schema_extra=cel_rules(
            cel_rule(
                f"self.verify.scheme in [{', '.join(repr(scheme) for scheme in CLOUD_EVENT_SCHEMES)}]",
                "a cloudEvent trigger is verified with standard-webhooks, hmac, bearer, or none (with "
                "allowUnsigned); the providers' schemes sign their own payloads, not CloudEvents",
                field_path=".verify.scheme",
            ),
        )
    )

    verify: WebhookVerification = Field(
        description="How an event is authenticated (standard-webhooks, hmac, bearer, or none with allowUnsigned); "
        "a bad signature answers 401. In binary mode the signature also covers the ce- headers.",
    )
    types: list[EventType] = Field(
        min_length=1, max_length=32, json_schema_extra={"x-kubernetes-list-type": "set"},
        description="The event types that start a run, matched exactly (no prefixes or wildcards); any other "
        "answers 202 ignored.",
    )
    sources: list[EventSource] = Field(
        default_factory=list, max_length=32, json_schema_extra={"x-kubernetes-list-type": "set"},
        description="The event sources accepted, matched exactly (no prefixes or wildcards); empty accepts any "
        "source the signature vouches for.",
    )
    filter: str | None = Field(
        default=None, max_length=1024,
        description="A CEL condition over `event` (its attributes and `event.data`); false answers 202 filtered.",
    )
    data: dict[Identifier, Annotated[str, Field(max_length=1024, description="A CEL expression.")]] = Field(
        default_factory=dict, max_length=32,
        description="trigger.data key -> CEL over `event` (e.g. event.data.order.id, event.subject); only these "
        "enter the run.",
    )
    max_body_bytes: BodyBytes = BODY_BYTES_DEFAULT
    rate_limit_per_minute: int = Field(
        default=60, ge=1, le=100_000,
        description="Verified events accepted per minute (a burst of this many); more answer 429.",
    )
    max_data_bytes: DataBytes = DATA_BYTES_DEFAULT

    def as_webhook(self) -> WebhookTrigger:
        """The delivery settings the ingress shares with webhook triggers (verification, body, rate, data cap)."""
        return WebhookTrigger(verify=self.verify, max_body_bytes=self.max_body_bytes,
                              rate_limit_per_minute=self.rate_limit_per_minute, max_data_bytes=self.max_data_bytes)
