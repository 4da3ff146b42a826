"""The trainer code a run trained with, kept with the run (`code/trainer.zip`), so the model a tracker logs later
carries that code rather than the exporting machine's (stacks/tracking/model.py). Standard library only."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path, PurePosixPath

PACKAGE = "trainer"
_EPOCH = (1980, 1, 1, 0, 0, 0)  # fixed entry times: the same code is the same bytes


def package_files(package_dir: Path) -> list[Path]:
    """The files of a package's folder that are its code, in path order (no caches: they differ per machine)."""
    return sorted(
        p for p in package_dir.rglob("*") if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"
    )


def archive_code(package_dir: Path, *, name: str = PACKAGE) -> bytes:
    """The package in `package_dir` as a zip of `<name>/<path>` entries, in path order: importable with the
    zip on sys.path (zipimport)."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for path in package_files(package_dir):
            entry = zipfile.ZipInfo(f"{name}/{path.relative_to(package_dir).as_posix()}", date_time=_EPOCH)
            entry.external_attr = 0o644 << 16
            archive.writestr(entry, path.read_bytes(), compress_type=zipfile.ZIP_DEFLATED)
    return out.getvalue()


def extract_code(data: bytes, dest: Path) -> Path:
    """An archive_code zip unpacked under `dest` -> the package folder (dest/trainer); refuses an entry that would
    land outside it."""
    root = Path(dest) / PACKAGE
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        for name in archive.namelist():
            parts = PurePosixPath(name).parts
            if not parts or parts[0] != PACKAGE or ".." in parts or PurePosixPath(name).is_absolute():
                raise ValueError(f"code archive entry {name!r} is not inside {PACKAGE}/")
            target = Path(dest).joinpath(*parts)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(archive.read(name))
    return root
