"""`check_access` asks Cloud Storage what the account may do (testIamPermissions), not only whether it may
list: recorded answers of the JSON API on 127.0.0.1 to the real google-cloud-storage client."""

from __future__ import annotations

import pytest

from tests.support.recorded_api import RecordedApi
from trainer.storage import StorageError, open_bucket

LIST = "/storage/v1/b/acme-runs/o"
TEST_PERMISSIONS = "/storage/v1/b/acme-runs/iam/testPermissions"


def served(granted: list[str]) -> RecordedApi:
    return RecordedApi(
        {
            ("GET", LIST): (200, {"kind": "storage#objects", "items": []}),
            ("GET", TEST_PERMISSIONS): (200, {"kind": "storage#testIamPermissionsResponse", "permissions": granted}),
        }
    )


def test_an_object_viewer_is_refused_before_anything_is_applied(monkeypatch):
    # Issue 38: a listing alone let an objectViewer through, to fail at its first write after the apply.
    with served(["storage.objects.list", "storage.objects.get"]) as api:
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", api.url)
        monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", "p1")
        with pytest.raises(StorageError) as err:
            open_bucket("gs://acme-runs/team").check_access("fr/")
        asked = api.requests("GET", TEST_PERMISSIONS)
    assert err.value.bad_input and "lacks storage.objects.create on gs://acme-runs" in err.value.message
    assert "roles/storage.objectUser" in err.value.message
    assert sorted(asked[0].query["permissions"]) == [
        "storage.objects.create",
        "storage.objects.get",
        "storage.objects.list",
    ]


def test_an_object_user_passes(monkeypatch):
    with served(["storage.objects.list", "storage.objects.get", "storage.objects.create"]) as api:
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", api.url)
        monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", "p1")
        open_bucket("gs://acme-runs/team").check_access("fr/")
        assert api.requests("GET", LIST)[0].query["prefix"] == ["team/fr/"]
