"""The MLflow tracking server as trainstack talks to it: quick to give up, and one error that says why.

The tracker is a mirror of the bucket: a server that is down, slow or refusing must never hold a
training command up, so requests get a short timeout and one retry unless the user set MLflow's own
variables (MLFLOW_HTTP_REQUEST_TIMEOUT, _MAX_RETRIES, _BACKOFF_FACTOR); credentials come the way MLflow
documents them (MLFLOW_TRACKING_TOKEN, MLFLOW_TRACKING_USERNAME/PASSWORD), never from the config or the bucket.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import sys
import threading
import warnings

from stacks.errors import TrackerUnavailable, TrainstackError

# What a mirror waits for at most per request (MLflow's defaults: 120 s, 7 retries with backoff 2).
QUICK = {
    "MLFLOW_HTTP_REQUEST_TIMEOUT": "10",
    "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "1",
    "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
    "MLFLOW_HTTP_REQUEST_BACKOFF_JITTER": "0",
    "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": "false",
    # a 503/429 with Retry-After: 3600 would otherwise hold the command for an hour (urllib3 sleeps it)
    "MLFLOW_HTTP_RESPECT_RETRY_AFTER_HEADER": "false",
}


class TrackerCallFailed(Exception):
    """An MLflow call failed while `doing` something to a named object (the MLflow error is the __cause__)."""

    def __init__(self, doing: str):
        super().__init__(doing)
        self.doing = doing


@contextlib.contextmanager
def doing(what: str):
    """MLflow's errors inside as TrackerCallFailed(what): `why` then names the object it was refused on."""
    try:
        yield
    except TrackerCallFailed:
        raise
    except Exception as exc:
        raise TrackerCallFailed(what) from exc


def why(exc: BaseException) -> str:
    """A failed MLflow call in a few words: unreachable, credentials refused, forbidden, a server error; with
    what it was doing when the call was made inside `doing(...)`."""
    if isinstance(exc, TrackerCallFailed) and exc.__cause__ is not None:
        return _why(exc.__cause__, exc.doing)
    return _why(exc, None)


def _why(exc: BaseException, what: str | None) -> str:
    text = str(exc)
    status = re.search(r"(?:code|status|too many) (\d{3})\b|\b(\d{3}) (?:Client|Server) Error", text)
    code = (status.group(1) or status.group(2)) if status else None
    at = f" {what}" if what else ""
    if code == "401" or "UNAUTHENTICATED" in text:
        return "refused the credentials (401): set MLFLOW_TRACKING_TOKEN or MLFLOW_TRACKING_USERNAME/PASSWORD"
    if code == "403" or "PERMISSION_DENIED" in text:
        if what:  # the account is known: what it may not touch is what to ask for
            return f"refused (403){at}: this account lacks the permission on it"
        return "forbids this account (403)"
    if code and code.startswith("5"):
        return f"server error ({code}){at}"
    if any(word in text for word in ("Connection", "connection", "Max retries", "timed out", "Timeout")):
        return "unreachable (connection failed or timed out)"
    return f"{type(exc).__name__}{at}: {text.splitlines()[0][:200] if text else ''}"


def quick_requests() -> None:
    """MLflow's HTTP retry settings for a mirror, where the user has not set their own."""
    for name, value in QUICK.items():
        os.environ.setdefault(name, value)


class MutedInThread:
    """sys.stdout or sys.stderr while one thread talks to MLflow: that thread's writes go nowhere, every other
    thread's reach the stream as before (a training command mirrors a run from its worker thread while the
    other languages' lines and the live table go on)."""

    def __init__(self, stream, thread: threading.Thread):
        self._stream, self._thread = stream, thread

    def write(self, text: str) -> int:
        return len(text) if threading.current_thread() is self._thread else self._stream.write(text)

    def flush(self) -> None:
        if threading.current_thread() is not self._thread:
            self._stream.flush()

    def __getattr__(self, name: str):  # isatty, encoding, fileno: the stream's own
        return getattr(self._stream, name)


@contextlib.contextmanager
def quiet():
    """MLflow's own chatter while logging (links to the run, advice on type hints and input examples): the
    command prints what happened in one line of its own."""
    loggers = [logging.getLogger(name) for name in ("mlflow", "mlflow.pyfunc", "mlflow.tracking")]
    levels = [logger.level for logger in loggers]
    me = threading.current_thread()
    # MLflow sets its own warning filters inside (so ignoring them is not enough): its chatter goes nowhere
    with (
        warnings.catch_warnings(),
        contextlib.redirect_stdout(MutedInThread(sys.stdout, me)),
        contextlib.redirect_stderr(MutedInThread(sys.stderr, me)),
    ):
        warnings.simplefilter("ignore")
        for logger in loggers:
            logger.setLevel(logging.ERROR)
        try:
            yield
        finally:
            for logger, level in zip(loggers, levels):
                logger.setLevel(level)


def exporting_user() -> str:
    """The account that exports, as MLflow names a run's user (the OS login), for runs that record none."""
    import getpass

    try:
        return getpass.getuser()
    except (KeyError, OSError):  # a container's uid without a passwd entry
        return "unknown"


@contextlib.contextmanager
def fluent_uris(tracker):
    """MLflow's module-level URIs pointed at `tracker` for the calls that read only those (logging a model,
    registering one), then put back as they were: mlflow.set_tracking_uri also exports MLFLOW_TRACKING_URI,
    which trainctl reads as the tracker of every later mirror in this process and its children."""
    import mlflow

    saved = {name: os.environ.get(name) for name in ("MLFLOW_TRACKING_URI", "MLFLOW_REGISTRY_URI")}
    mlflow.set_tracking_uri(tracker.uri)
    mlflow.set_registry_uri(tracker.registry_uri)
    try:
        yield
    finally:
        mlflow.set_tracking_uri(saved["MLFLOW_TRACKING_URI"])
        mlflow.set_registry_uri(saved["MLFLOW_REGISTRY_URI"])
        for name, value in saved.items():  # set_registry_uri(None) leaves the variable set
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


class Tracker:
    """One experiment of one MLflow server, opened once per command (`open_tracker`)."""

    def __init__(self, uri: str, experiment: str, *, registry_uri: str | None = None):
        quick_requests()
        from mlflow import MlflowClient

        self.uri, self.experiment_name, self.registry_uri = uri, experiment, registry_uri or uri
        self.client = MlflowClient(tracking_uri=uri, registry_uri=self.registry_uri)
        with doing(f"reading or creating experiment {experiment!r}"):
            self.experiment_id = self._experiment(experiment)

    def _experiment(self, name: str) -> str:
        found = self.client.get_experiment_by_name(name)
        if found is not None:
            if found.lifecycle_stage == "deleted":
                self.client.restore_experiment(found.experiment_id)
            return found.experiment_id
        try:
            return self.client.create_experiment(name, tags={"trainstack.experiment": name})
        except Exception:  # created meanwhile by another command
            found = self.client.get_experiment_by_name(name)
            if found is None:
                raise
            return found.experiment_id

    def find(self, run_id: str, lang: str):
        """The MLflow run mirroring trainstack run `run_id` of `lang`, or None. Where there are several (a
        create_run retried after the server had committed it, two commands mirroring at once), the oldest
        is the mirror and the others are deleted, so a duplicate never outlives the next export."""
        found = self.client.search_runs(
            [self.experiment_id],
            max_results=50,
            filter_string=f"tags.`trainstack.run_id` = '{run_id}' and tags.`trainstack.lang` = '{lang}'",
        )
        if not found:
            return None
        keep, *extra = sorted(found, key=lambda run: (run.info.start_time or 0, run.info.run_id))
        for duplicate in extra:
            self.client.delete_run(duplicate.info.run_id)
        return keep


def open_tracker(uri: str, experiment: str, *, registry_uri: str | None = None) -> Tracker:
    """The experiment on that server (created when absent); TrackerUnavailable when it cannot be used."""
    try:
        return Tracker(uri, experiment, registry_uri=registry_uri)
    except TrainstackError:
        raise
    except Exception as exc:  # MLflow raises MlflowException and requests' errors alike
        raise TrackerUnavailable(uri, why(exc)) from exc
