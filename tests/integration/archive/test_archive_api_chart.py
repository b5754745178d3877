"""The chart's registration of the archive's API, as `helm template` renders it: the APIService trusts exactly the
CA that signed the certificate in the Secret the archive serves with, for the name the API server dials."""

from __future__ import annotations

import base64

from cryptography import x509
from tests.integration.helmsupport import find, render

from towline_dev.binaries import BinarySet


def test_the_apiservice_trusts_the_ca_of_the_archives_serving_certificate(k8s_binaries: BinarySet) -> None:
    documents = render(k8s_binaries, {"archive.enabled": "true"})
    api_service = find(documents, "APIService", "v1alpha1.archive.towline.dev")
    secret = find(documents, "Secret", "towline-archive-api-tls", "towline-system")
    service = find(documents, "Service", "towline-archive", "towline-system")

    assert api_service["spec"]["service"] == {"name": "towline-archive", "namespace": "towline-system", "port": 443}
    assert api_service["spec"]["caBundle"] == secret["data"]["ca.crt"]
    ca = x509.load_pem_x509_certificate(base64.b64decode(secret["data"]["ca.crt"]))
    serving = x509.load_pem_x509_certificate(base64.b64decode(secret["data"]["tls.crt"]))
    serving.verify_directly_issued_by(ca)
    names = serving.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "towline-archive.towline-system.svc" in names.get_values_for_type(x509.DNSName)
    assert service["spec"]["ports"] == [{"name": "https", "port": 443, "targetPort": "api"}]


def test_the_archive_may_ask_the_authorizer_and_read_the_front_proxy_settings_only(k8s_binaries: BinarySet) -> None:
    documents = render(k8s_binaries, {"archive.enabled": "true"})
    auth = find(documents, "ClusterRole", "towline-archive-auth")
    assert auth["rules"] == [{"apiGroups": ["authorization.k8s.io"], "resources": ["subjectaccessreviews"],
                              "verbs": ["create"]}]
    reader = find(documents, "RoleBinding", "towline-archive-auth-reader", "kube-system")
    assert reader["roleRef"]["name"] == "extension-apiserver-authentication-reader"
    assert [s["name"] for s in reader["subjects"]] == ["towline-archive"]
    off = render(k8s_binaries, {"archive.enabled": "false"})
    assert not [d for d in off if d["kind"] == "APIService"]
