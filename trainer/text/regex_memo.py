"""Large regular expressions compiled once per machine, not once per process.

spaCy's French tokenizer compiles a 1.4 MB pattern when its language module is imported: ~3.3 CPU-s
in every process that tokenizes French or loads a French model, for ~6 ms of actual work. The
compiled program is a pure function of the pattern, the flags and the interpreter's regex engine,
so it is kept on disk keyed by all three, and later processes hand it to the engine's own
constructor (`_sre.compile`, what `re.compile` calls last). A file that is missing, damaged or
written by another engine, or an engine that takes other arguments, means an ordinary compile.

The seam is `re._compile`: `re.compile` calls it, and so does unpickling a compiled pattern (a fastai
learner exported with spaCy's French tokenizer holds one), which names it in the pickle.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

LARGE_PATTERN_CHARS = 64 * 1024  # smaller patterns compile in milliseconds: not worth a file
_ordinary = re._compile
_lock = threading.Lock()
_users = 0  # contexts open now: the last one out puts re.compile back

try:  # CPython 3.11+: the compiler's stages, public in all but name
    import _sre
    from re import _compiler, _parser
except ImportError:  # another interpreter: every compile is an ordinary one
    _sre = _compiler = _parser = None


def cache_dir() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "trainstack" / "regex"


def _engine() -> str:
    return f"{sys.implementation.cache_tag} {sys.version} {_sre.MAGIC} {_sre.CODESIZE}"


def _path(pattern: str, flags: int) -> Path:
    key = hashlib.sha256(f"{_engine()}\0{flags}\0{pattern}".encode("utf-8", "surrogatepass")).hexdigest()
    return cache_dir() / f"{key[:32]}.bin"


def _typecode() -> str:
    return "I" if _sre.CODESIZE == 4 else "H"


def _load(path: Path, pattern: str, flags: int) -> re.Pattern | None:
    import array

    try:
        blob = path.read_bytes()
        head, _, body = blob.partition(b"\n")
        meta = json.loads(head)
        if meta["engine"] != _engine() or meta["sha256"] != hashlib.sha256(body).hexdigest():
            return None
        code = array.array(_typecode())
        code.frombytes(body)
        return _sre.compile(
            pattern, meta["flags"], code.tolist(), meta["groups"], meta["groupindex"], tuple(meta["indexgroup"])
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _compile_and_keep(path: Path, pattern: str, flags: int) -> re.Pattern:
    import array

    parsed = _parser.parse(pattern, flags)
    code = _compiler._code(parsed, flags)
    groupindex = dict(parsed.state.groupdict)
    indexgroup = [None] * parsed.state.groups
    for name, index in groupindex.items():
        indexgroup[index] = name
    meta = {
        "engine": _engine(),
        "flags": flags | parsed.state.flags,
        "groups": parsed.state.groups - 1,
        "groupindex": groupindex,
        "indexgroup": indexgroup,
    }
    compiled = _sre.compile(pattern, meta["flags"], code, meta["groups"], groupindex, tuple(indexgroup))
    body = array.array(_typecode(), code).tobytes()
    meta["sha256"] = hashlib.sha256(body).hexdigest()
    with contextlib.suppress(OSError):  # a cache that cannot be written costs the next process a compile
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".part-")
        with os.fdopen(fd, "wb") as f:
            f.write(json.dumps(meta).encode() + b"\n" + body)
        os.replace(tmp, path)
    return compiled


def compile_remembered(pattern, flags=0):
    """`re._compile`, with large str patterns read from (or written to) the cache."""
    if _sre is None or not isinstance(pattern, str) or len(pattern) < LARGE_PATTERN_CHARS:
        return _ordinary(pattern, flags)
    flags = int(flags)
    try:
        path = _path(pattern, flags)
    except RuntimeError:  # no home folder to keep it in (a container's user without one)
        return _ordinary(pattern, flags)
    compiled = _load(path, pattern, flags)
    if compiled is None:
        try:
            compiled = _compile_and_keep(path, pattern, flags)
        except (TypeError, AttributeError):  # an engine whose stages differ from 3.11's
            return _ordinary(pattern, flags)
    return compiled


@contextlib.contextmanager
def large_patterns_remembered() -> Iterator[None]:
    """While inside, compiling a large pattern (`re.compile` by any module, e.g. an import of spaCy's French
    language, or an unpickled pattern) goes through the cache; nested and concurrent uses share one replacement."""
    global _users
    with _lock:
        _users += 1
        re._compile = compile_remembered
    try:
        yield
    finally:
        with _lock:
            _users -= 1
            if _users == 0:
                re._compile = _ordinary
