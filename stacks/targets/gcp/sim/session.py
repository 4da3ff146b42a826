"""The simulated Google Cloud a `gcp.simulated` env's command runs against, started by trainctl itself.

The first time a command loads such an env, this process starts the simulated Compute Engine, Cloud Quotas,
Billing Catalog, Artifact Registry and metadata servers (one port), the VMs' agents, and a Cloud Storage
emulator (gcp-storage-emulator, its objects on disk under the env's folder, so `data push` and a later `train`
share the bucket); it points every Google endpoint of this process and its children at them, and stops them
all when the process exits. Nothing here can reach Google: each endpoint variable is set, none is read.

The simulated cloud lives as long as the command: its VMs and groups go with it (a later command finds an empty
cloud and the bucket as it was left).
"""

from __future__ import annotations

import atexit
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


@dataclass
class SimulatedSession:
    """What a command started: the sim's URL, its cloud and VMs, the storage emulator, and how to stop them."""

    url: str
    storage_url: str
    cloud: object
    vms: object
    states: Path  # the simulated apply's state of each stack, for this session only
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
    """The env's simulated Google Cloud, started once per process (stopped at exit)."""
    from stacks.targets.gcp.sim.scenario import DEFAULT_SCENARIO, load_scenario

    sim = config.gcp.simulated
    path = (root / sim.scenario) if sim.scenario else DEFAULT_SCENARIO
    overrides = {**sim.overrides, **({"speedup": sim.speedup} if sim.speedup else {})}
    key = (str(path), repr(overrides), config.bucket)
    with _LOCK:
        if key in _CURRENT:
            return _CURRENT[key]
        if _CURRENT:
            raise ConfigError("one simulated Google Cloud per trainctl command", hint="run one env at a time")
        scenario = load_scenario(path, overrides)
        if config.gcp.project != scenario.project:
            raise ConfigError(
                f"gcp.project is {config.gcp.project!r} but the simulated cloud's scenario {path} holds project "
                f"{scenario.project!r}",
                hint=f"set gcp.project: {scenario.project} in envs/{config.env}.yaml",
            )
        session = _start(config, scenario, path, env_dir, say)
        _CURRENT[key] = session
        atexit.register(_stop_all)
        _exit_on_sigterm()
        return session


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


def _start(config, scenario, path: Path, env_dir: Path, say) -> SimulatedSession:
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
    states = Path(tempfile.mkdtemp(prefix="trainstack-sim-states-"))  # the cloud's state goes with the cloud

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
    return SimulatedSession(server.url, storage_url, cloud, vms, states, stops)


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
