"""Checksums, to tell that an object holds the same bytes as a local file without reading the object.

A gs:// object's come from its metadata: md5 (objects uploaded whole; a composite object has none) and
crc32c (always). A file:// object's are computed from the stored file. A local file's are taken while it
is read for another purpose (the check of its content) by ChecksummingReader, so it is read once.
"""

from __future__ import annotations

import hashlib
import io
from dataclasses import dataclass
from typing import BinaryIO

CHUNK = 1 << 18  # bytes read at a time: a file is digested, copied or compared a chunk at a time


@dataclass(frozen=True)
class Checksum:
    """Hex digests of one object's bytes; None where unknown."""

    md5: str | None = None
    crc32c: str | None = None

    def same_as(self, other: Checksum) -> bool | None:
        """Whether the bytes are the same, by the strongest digest both have (md5, else crc32c); None when they
        have none in common."""
        for mine, theirs in ((self.md5, other.md5), (self.crc32c, other.crc32c)):
            if mine is not None and theirs is not None:
                return mine == theirs
        return None


def _crc32c_hasher():
    """google-crc32c's hasher (a dependency of google-cloud-storage), None without its C code: the pure-Python one
    would take minutes on a large file, and md5 decides wherever both sides have it."""
    try:
        import google_crc32c
    except ImportError:
        return None
    return google_crc32c.Checksum() if google_crc32c.implementation == "c" else None


class Digests:
    """md5 and crc32c of bytes given in order."""

    def __init__(self):
        self._md5, self._crc32c = hashlib.md5(usedforsecurity=False), _crc32c_hasher()

    def update(self, data) -> None:
        self._md5.update(data)
        if self._crc32c is not None:
            self._crc32c.update(bytes(data))  # it takes read-only bytes only, not a view of a read buffer

    def checksum(self) -> Checksum:
        return Checksum(self._md5.hexdigest(), self._crc32c.digest().hex() if self._crc32c is not None else None)


def stream_checksum(stream: BinaryIO) -> Checksum:
    """The checksum of what is left of `stream`, read a chunk at a time."""
    digests = Digests()
    while chunk := stream.read(CHUNK):
        digests.update(chunk)
    return digests.checksum()


class ChecksummingReader(io.RawIOBase):
    """A seekable binary file, read through this for another purpose, its checksum taken on the way: the bytes
    that pass in order from the start are digested as they pass, and checksum() reads whatever the reader
    skipped or never reached. Closing this leaves the file open: its owner closes it.

    Wrap it in io.BufferedReader for readers that read lines or small pieces. `sink`: gets each digested chunk
    too, so that it ends up holding exactly the bytes the checksum is of."""

    def __init__(self, fh: BinaryIO, sink: BinaryIO | None = None):
        super().__init__()
        self._fh, self._digests, self._digested = fh, Digests(), 0  # _digested: bytes from the start
        self._checksum: Checksum | None = None
        self._sink = sink

    def _digest(self, chunk) -> None:
        self._digests.update(chunk)
        if self._sink is not None:
            self._sink.write(chunk)

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        start = self._fh.tell()
        n = self._fh.readinto(buffer) or 0
        if start <= self._digested < start + n:
            self._digest(memoryview(buffer)[self._digested - start : n])
            self._digested = start + n
        return n

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        return self._fh.seek(offset, whence)

    def tell(self) -> int:
        return self._fh.tell()

    def checksum(self) -> Checksum:
        """The whole file's checksum: what the reads in order did not cover is read now."""
        if self._checksum is None:
            self._fh.seek(self._digested)
            while chunk := self._fh.read(CHUNK):
                self._digest(chunk)
            self._checksum = self._digests.checksum()
        return self._checksum
