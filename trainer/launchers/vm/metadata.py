"""A tiny client for the GCE metadata server (plain text over HTTP).

The host is `GCE_METADATA_HOST` (else the older `GCE_METADATA_ROOT`, else
metadata.google.internal), the same variables google-auth honours, so tests
can point it at 127.0.0.1:PORT.
"""

from __future__ import annotations

import os
import time
import urllib.error
import urllib.request

DEFAULT_HOST = "metadata.google.internal"


class MetadataError(Exception):
    """The metadata server did not answer, or a required key is missing."""


def metadata_root() -> str:
    host = os.environ.get("GCE_METADATA_HOST") or os.environ.get("GCE_METADATA_ROOT") or DEFAULT_HOST
    return f"http://{host}/computeMetadata/v1/"


class MetadataClient:
    """Reads `instance/...` paths; missing keys are None, server errors are retried."""

    def __init__(self, root: str | None = None, tries: int = 5, backoff_s: float = 1.0, timeout_s: float = 10):
        self.root = root or metadata_root()
        self.tries, self.backoff_s, self.timeout_s = tries, backoff_s, timeout_s

    def get(self, path: str) -> str | None:
        """The value at `path` (e.g. instance/name), None if the server has no such key."""
        request = urllib.request.Request(self.root + path, headers={"Metadata-Flavor": "Google"})
        last: Exception | None = None
        for attempt in range(self.tries):
            try:
                with urllib.request.urlopen(request, timeout=self.timeout_s) as resp:
                    return resp.read().decode()
            except urllib.error.HTTPError as exc:
                if exc.code == 404:
                    return None
                last = exc
            except (urllib.error.URLError, OSError) as exc:
                last = exc  # the metadata server can be briefly unreachable right after boot
            if attempt + 1 < self.tries:
                time.sleep(self.backoff_s * (attempt + 1))
        raise MetadataError(f"metadata server {self.root} did not answer for {path}: {last}")

    def watch(self, path: str, last_etag: str | None = None, timeout_s: float = 60) -> tuple[str | None, str | None]:
        """(value, ETag) of `path`. With `last_etag`, a long poll: the metadata server answers at once when the
        value's ETag differs from it, else when the value changes or after `timeout_s` (the same value and ETag
        then); without, the value now and its ETag, to wait on next (waiting without one could miss a change
        that came between two reads). (None, None): no such key. One try: the caller decides how to go on."""
        query = f"?wait_for_change=true&last_etag={last_etag}&timeout_sec={int(timeout_s)}" if last_etag else ""
        request = urllib.request.Request(self.root + path + query, headers={"Metadata-Flavor": "Google"})
        try:
            with urllib.request.urlopen(
                request, timeout=(timeout_s + self.timeout_s) if last_etag else self.timeout_s
            ) as resp:
                return resp.read().decode(), resp.headers.get("ETag")
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return None, None
            raise MetadataError(f"metadata server {self.root} answered {exc.code} for {path}") from exc
        except (urllib.error.URLError, OSError) as exc:
            raise MetadataError(f"metadata server {self.root} did not answer for {path}: {exc}") from exc

    def attribute(self, key: str, default: str | None = None) -> str | None:
        """A custom metadata value (instance/attributes/<key>), or `default` when absent."""
        value = self.get(f"instance/attributes/{key}")
        return default if value is None else value

    def require(self, key: str) -> str:
        """A custom metadata value that the stack must have written."""
        value = self.attribute(key)
        if value is None or not value.strip():
            raise MetadataError(f"instance metadata has no '{key}' (the train stack writes it)")
        return value.strip()
