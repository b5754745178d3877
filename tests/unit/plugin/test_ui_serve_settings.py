"""`towline ui`'s settings (the chart's ui.* values): one that cannot work is refused naming the chart's key and
the fix, before anything is served."""

from __future__ import annotations

from dataclasses import replace

import pytest

from towline.plugin.ui.serving import ServeSettings, SettingsError, check_settings

GOOD = ServeSettings(url="https://towline.example.com", issuer="https://sso.example.com", client_id="towline-web",
                     client_secret="s3cret", scopes=("openid", "email"), default_namespace="team",
                     api_server="https://10.0.0.1:443", api_ca_file="/ca.crt")


def test_settings_as_the_docs_write_them_pass() -> None:
    check_settings(GOOD)
    check_settings(replace(GOOD, webhook_url="https://hooks.example.com"))
    check_settings(replace(GOOD, url="http://127.0.0.1:8080", issuer="http://localhost:4444"))


@pytest.mark.parametrize(("changes", "named"), [
    ({"url": "http://towline.example.com"}, "ui.url"),
    ({"url": "https://towline.example.com/towline"}, "ui.url"),
    ({"issuer": "http://sso.example.com"}, "ui.oidc.issuer"),
    ({"client_id": ""}, "ui.oidc.clientId"),
    ({"client_secret": ""}, "ui.oidc.clientSecret"),
    ({"scopes": ("email", "profile")}, "ui.oidc.scopes"),
    ({"webhook_url": "hooks.example.com"}, "ui.webhookUrl"),
    ({"webhook_url": "https://hooks.example.com/hooks/"}, "ui.webhookUrl"),
    ({"webhook_url": "ftp://hooks.example.com"}, "ui.webhookUrl"),
    ({"operator_namespace": "Towline_System"}, "--operator-namespace"),
])
def test_a_setting_that_cannot_work_is_refused_naming_its_chart_key(changes: dict[str, object], named: str) -> None:
    with pytest.raises(SettingsError) as refused:
        check_settings(replace(GOOD, **changes))  # type: ignore[arg-type]
    assert named in str(refused.value), refused.value
