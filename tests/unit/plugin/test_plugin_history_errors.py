"""`kubectl towline history|logs|export` say "no archive" only when the API server serves no archive group; the
archive's own 404 (no such run, no log of that step) is passed on as it is."""

from __future__ import annotations

from towline.k8s.client import ApiError
from towline.plugin.history import ARCHIVE_OFF, _explained


def test_a_group_nobody_serves_means_the_archive_is_not_installed() -> None:
    assert _explained(ApiError(404, "the server could not find the requested resource")) == ARCHIVE_OFF


def test_the_archives_own_not_found_is_passed_on() -> None:
    message = 'the archive holds no log of step "apply" of the run "deploy-1" in the namespace "ops"'
    assert _explained(ApiError(404, message)) == message
    forbidden = 'User "bob" cannot list archivedruns: the archive shows it to whoever may list workflowruns'
    assert _explained(ApiError(403, forbidden)) == forbidden
