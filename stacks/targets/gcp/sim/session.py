"""The simulated Google Cloud a `gcp.simulated` env's command runs against, started by trainctl itself.

The first time a command loads such an env, this process starts the simulated Compute Engine, Cloud Quotas,
Billing Catalog, Artifact Registry and metadata servers (one port), the VMs' agents, and a Cloud Storage
emulator (gcp-storage-emulator, its objects on disk under the env's folder, so `data push` and a later `train`
share the bucket); it points every Google endpoint of this process and its children at them, and stops them
all when the process exits. Nothing here can reach Google: each endpoint variable is set, none is read.

The simulated cloud lives as long as the command: its VMs and groups go with it (a later command finds an empty
cloud and the bucket as it was left). Unless it is served: `python -m stacks.targets.gcp.sim serve --env NAME`
starts the same cloud for as long as it runs and writes where it is to `.trainstack/<env>/simulated-cloud.json`
(SERVED_FILE); every command of the env then attaches to it (runs outlive their command, `gc` sees their stacks).
"""

from __future__ import annotations

import atexit
import json
import os
import signal
import socket
import sys
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from stacks.errors import ConfigError, ToolMissingError

# Every TRAINSTACK_<API>_ENDPOINT the gcp target and the VM agent read: all point at the sim, so a call the
# sim cannot answer fails at 127.0.0.1 instead of reaching Google.
GOOGLE_APIS = (
    "COMPUTE",
    "CLOUDQUOTAS",
    "CLOUDBILLING",
    "REGISTRY",
    "CLOUDBUILD",
    "SERVICEUSAGE",
    "RESOURCEMANAGER",
    "POLICYTROUBLESHOOTER",
)
STORAGE_ENV = "STORAGE_EMULATOR_HOST"  # google-cloud-storage's own variable
SERVED_FILE = "simulated-cloud.json"  # in the env's folder while `serve` runs: url, storage_url, speedup, states, pid
SERVED_STATES = "simulated-states"  # the served cloud's stack states, in the env's folder (every command reads them)


@dataclass
class SimulatedSession:
    """The simulated cloud a command talks to: its URL, the storage emulator's, its clock's speed, where the
    simulated applies keep each stack's state; the cloud and VMs when this process runs them, and how to stop them."""

    url: str
    storage_url: str
    speedup: float  # simulated seconds per wall second
    states: Path  # the simulated apply's state of each stack, for as long as the cloud lives
    cloud: object | None = None  # None: attached to a cloud another process serves
    vms: object | None = None
    outlives_command: bool = False  # served: its VMs (the runs) go on when this command exits
    _stops: list[Callable[[], None]] = field(default_factory=list)

    def stop(self) -> None:
        while self._stops:
            try:
                self._stops.pop()()
            except Exception:  # stopping what is left must not hide the command's own outcome
                pass


_CURRENT: dict[tuple, SimulatedSession] = {}
_LOCK = threading.Lock()


def current() -> SimulatedSession | None:
    """The session this process started (None: none)."""
    return next(iter(_CURRENT.values()), None)


def start(config, env_dir: Path, root: Path, say: Callable[[str], None]) -> SimulatedSession:
    """The env's simulated Google Cloud, once per process: the one `serve` runs for the env if it is up (attached:
    nothing to stop at exit), else started here (stopped at exit)."""
    path, overrides = _scenario_of(config, root)
    key = (str(path), repr(overrides), config.bucket)
    with _LOCK:
        if key in _CURRENT:
            return _CURRENT[key]
        if _CURRENT:
            raise ConfigError("one simulated Google Cloud per trainctl command", hint="run one env at a time")
        served = _served(env_dir, say)
        if served is not None:
            session = _attach(served, config, path, overrides, say)
        else:
            session = _start(config, _scenario(config, path, overrides), path, env_dir, say)
            atexit.register(_stop_all)
            _exit_on_sigterm()
        _CURRENT[key] = session
        return session


def serve(config, env_dir: Path, root: Path, say: Callable[[str], None]) -> SimulatedSession:
    """The env's simulated Google Cloud for every command of the env until `stop()`: started as a command starts its
    own, its stack states in the env's folder, where it is written to SERVED_FILE (removed first at stop)."""
    import shutil

    path, overrides = _scenario_of(config, root)
    with _LOCK:
        served = _served(env_dir, say)
        if served is not None:
            raise ConfigError(
                f"simulated Google Cloud already served for env {config.env} by pid {served['pid']} at {served['url']}",
                hint=f"use it (trainctl ... --env {config.env} attaches), or stop it first (Ctrl-C in its terminal, "
                f"or kill {served['pid']})",
            )
        scenario = _scenario(config, path, overrides)
        states = env_dir / SERVED_STATES
        shutil.rmtree(states, ignore_errors=True)  # a served cloud that was killed: its groups went with it
        session = _start(config, scenario, path, env_dir, say, states=_mkdir(states))
        file = env_dir / SERVED_FILE
        record = {
            "pid": os.getpid(),
            "url": session.url,
            "storage_url": session.storage_url,
            "speedup": session.speedup,
            "states": str(states),
            "bucket": config.bucket,
            "scenario": str(path),
            "overrides": overrides,
        }
        partial = file.with_suffix(".json.partial")
        partial.write_text(json.dumps(record, indent=1))
        partial.replace(file)  # a command reads the whole file or none
        session.outlives_command = True
        session._stops.append(lambda: file.unlink(missing_ok=True))  # first at stop: no command attaches any more
        say(f"simulated Google Cloud served for env {config.env} (pid {os.getpid()}): its address in {file}")
        _CURRENT[(str(path), repr(overrides), config.bucket)] = session
        return session


def _scenario_of(config, root: Path) -> tuple[Path, dict]:
    """The env's scenario file and the overrides merged over it (gcp.simulated)."""
    from stacks.targets.gcp.sim.scenario import DEFAULT_SCENARIO

    sim = config.gcp.simulated
    path = (root / sim.scenario) if sim.scenario else DEFAULT_SCENARIO
    return path, {**sim.overrides, **({"speedup": sim.speedup} if sim.speedup else {})}


def _scenario(config, path: Path, overrides: dict):
    from stacks.targets.gcp.sim.scenario import load_scenario

    scenario = load_scenario(path, overrides)
    if config.gcp.project != scenario.project:
        raise ConfigError(
            f"gcp.project is {config.gcp.project!r} but the simulated cloud's scenario {path} holds project "
            f"{scenario.project!r}",
            hint=f"set gcp.project: {scenario.project} in envs/{config.env}.yaml",
        )
    return scenario


def _served(env_dir: Path, say: Callable[[str], None]) -> dict | None:
    """What SERVED_FILE says of the env's served cloud, when its process is alive and its URL answers; a file left by
    one that is gone is removed, saying so (None)."""
    file = env_dir / SERVED_FILE
    try:
        served = json.loads(file.read_text())
        pid, url = int(served["pid"]), str(served["url"])
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError):
        served, pid, url = None, None, None
    if pid is not None and _alive(pid) and _answers(url):
        return served
    file.unlink(missing_ok=True)
    said = f"pid {pid} is gone" if pid is not None and not _alive(pid) else "it does not answer"
    say(f"simulated Google Cloud: {file} named a served cloud, but {said}: removed; this command starts its own")
    return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def _answers(url: str) -> bool:
    """Whether the sim's HTTP server at `url` answers at all (any status)."""
    from urllib.error import HTTPError
    from urllib.request import urlopen

    try:
        with urlopen(f"{url}/", timeout=5):
            return True
    except HTTPError:
        return True
    except (OSError, ValueError):
        return False


def _attach(served: dict, config, path: Path, overrides: dict, say) -> SimulatedSession:
    """This command's Google endpoints at the served cloud; nothing to stop when it exits."""
    if served.get("bucket") != config.bucket:  # the served storage emulator holds the served env's bucket alone
        raise ConfigError(
            f"bucket is {config.bucket} but the simulated cloud pid {served['pid']} serves for env {config.env} holds "
            f"{served.get('bucket')}",
            hint=f"run without changing the bucket, or stop pid {served['pid']} and serve the env with this one",
        )
    ours = {"scenario": str(path), "overrides": overrides}
    differ = [k for k, v in ours.items() if json.dumps(v, sort_keys=True) != json.dumps(served.get(k), sort_keys=True)]
    if differ:  # the served cloud's scenario holds: say so rather than let the command's settings seem to apply
        say(
            f"simulated: this command's gcp.simulated {' and '.join(differ)} differ from the served cloud's, which "
            f"hold (serve the env again to change them): {', '.join(json.dumps(served.get(k)) for k in differ)}"
        )
    for name in GOOGLE_APIS:
        os.environ[f"TRAINSTACK_{name}_ENDPOINT"] = served["url"]
    os.environ[STORAGE_ENV] = served["storage_url"]
    say(f"simulated Google Cloud served by pid {served['pid']} at {served['url']}: this command attaches")
    return SimulatedSession(
        served["url"], served["storage_url"], float(served["speedup"]), Path(served["states"]), outlives_command=True
    )


def _exit_on_sigterm() -> None:
    """SIGTERM or SIGHUP (a closed terminal, a timeout) ends the command as an exit does, so the simulated VMs'
    processes are stopped with it (their agents run in sessions of their own, as on their own machines)."""
    if threading.current_thread() is not threading.main_thread():
        return
    for sig in (signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(sig) is signal.SIG_DFL:
            signal.signal(sig, lambda signum, _frame: sys.exit(128 + signum))


def _stop_all() -> None:
    for session in list(_CURRENT.values()):
        session.stop()
    _CURRENT.clear()


def _start(config, scenario, path: Path, env_dir: Path, say, *, states: Path | None = None) -> SimulatedSession:
    from stacks.targets.gcp.sim.cloud import SimCloud
    from stacks.targets.gcp.sim.server import SimServer
    from stacks.targets.gcp.sim.vms import VmRunner

    stops: list[Callable[[], None]] = []
    try:
        storage_url = _storage_emulator(config.bucket, env_dir / "simulated-gcs", stops)
        cloud = SimCloud(scenario)
        server = SimServer(cloud).__enter__()
        stops.append(lambda: server.__exit__(None, None, None))
        work = Path(tempfile.mkdtemp(prefix="vms-", dir=_mkdir(env_dir / "simulated-vms")))
        for name in GOOGLE_APIS:
            os.environ[f"TRAINSTACK_{name}_ENDPOINT"] = server.url
        os.environ[STORAGE_ENV] = storage_url
        vms = VmRunner(
            cloud,
            server.url,
            server.metadata_host,
            work,
            env={STORAGE_ENV: storage_url, "TRAINSTACK_GRACE_S": "10"},
            say=say,
        ).__enter__()
        stops.append(lambda: vms.__exit__(None, None, None))
    except BaseException:
        for stop in reversed(stops):
            stop()
        raise
    # the cloud's state goes with the cloud
    states = states or Path(tempfile.mkdtemp(prefix="trainstack-sim-states-"))

    say(
        f"simulated Google Cloud at {server.url} (project {scenario.project}, scenario {path}, "
        f"{scenario.speedup:g} simulated s per wall s); bucket {config.bucket} in a simulated Cloud Storage"
    )
    say(
        "simulated: the foundation (IAM, registry, state bucket) and the trainer image are taken as in place (no "
        f"Cloud Build); each VM runs the VM agent and this checkout's trainer here (logs under {work})"
    )
    # stopped last to first: the VMs, the API server, the storage emulator, then these
    stops[:0] = [lambda: say("simulated Google Cloud: stopped, its VMs with it"), lambda: _forget(states, work)]
    return SimulatedSession(server.url, storage_url, scenario.speedup, states, cloud, vms, _stops=stops)


def _forget(states: Path, work: Path) -> None:
    """The simulated applies' state, gone with the cloud; the VMs' folder kept for their logs, if any ran."""
    import shutil

    shutil.rmtree(states, ignore_errors=True)
    if not any(work.iterdir()):
        work.rmdir()


def _mkdir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


def _storage_emulator(bucket_uri: str, data_dir: Path, stops: list) -> str:
    """gcp-storage-emulator in this process, its objects kept in `data_dir`, the env's bucket created."""
    try:
        from gcp_storage_emulator.server import create_server
    except ImportError:
        raise ToolMissingError(
            "gcp-storage-emulator", "pip install gcp-storage-emulator (a simulated env's bucket lives in it)"
        ) from None
    import logging

    logging.getLogger("gcp_storage_emulator").setLevel(logging.CRITICAL)  # a read of a missing object is no error
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    name = bucket_uri.removeprefix("gs://").split("/", 1)[0]
    _mkdir(data_dir)
    # default_bucket: created unless the folder holds it already (a later command finds what was pushed)
    server = create_server("127.0.0.1", port, in_memory=False, default_bucket=name, data_dir=str(data_dir))
    _relink(server._storage.objects, f"http://127.0.0.1:{port}")
    server._api.daemon = True  # the process exits without waiting for it (then atexit stops it)
    server.start()
    stops.append(server.stop)
    return f"http://127.0.0.1:{port}"


def _relink(objects: dict[str, dict[str, dict]], base: str) -> None:
    """Every kept object's mediaLink pointed at this emulator. The emulator keeps the link it wrote, naming its own
    port then: an earlier command's, closed now, where a read of an object's metadata and then of its media by that
    link (a conditional read, as a resume's) would retry until its deadline."""
    for bucket in objects.values():
        for obj in bucket.values():
            link = obj.get("mediaLink")
            if isinstance(link, str) and "/download/" in link:
                obj["mediaLink"] = base + link[link.index("/download/") :]


def say_simulated(line: str) -> None:
    print(line, file=sys.stderr, flush=True)
