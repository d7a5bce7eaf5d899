"""TierFileIO: pyiceberg's FileIO over the remote tier's own filesystem, so a table's files are
read and written with the tier's storage options (no second naming of them in pyiceberg's
``s3.*`` properties) and written the way the tier publishes every object.
"""

from __future__ import annotations

import io
from types import TracebackType
from typing import Self

import fsspec
from pyiceberg.io import InputFile, OutputFile, OutputStream
from pyiceberg.io.fsspec import FsspecFileIO, FsspecOutputFile
from pyiceberg.typedef import EMPTY_DICT, Properties

from tierlog.remote.tier.object_store import RemoteTier


class TierFileIO(FsspecFileIO):
    """Reads through the tier's fsspec filesystem; writes buffer the (small: manifest, manifest
    list) file and publish it with ``RemoteTier.put_bytes`` when closed (atomic, size-checked,
    durable on a local tier, counted in the tier's stats), or ``put_if_absent`` when the
    caller asked not to overwrite. Only locations on the tier's filesystem are served (a
    location of another scheme raises ValueError). Thread-safe as the tier is."""

    def __init__(self, tier: RemoteTier, properties: Properties = EMPTY_DICT) -> None:
        super().__init__(dict(properties))
        self.tier = tier

    def _get_fs(self, scheme: str, hostname: str | None = None) -> fsspec.AbstractFileSystem:
        protocols = {self.tier.fs.protocol} if isinstance(self.tier.fs.protocol, str) \
            else set(self.tier.fs.protocol)
        if "file" in protocols:
            protocols.add("")
        if scheme not in protocols:
            raise ValueError(f"a location of scheme {scheme!r} is not on the tier "
                             f"({self.tier!r})")
        return self.tier.fs

    def new_output(self, location: str) -> TierOutputFile:
        self.get_fs(_scheme(location))
        return TierOutputFile(location, self.tier)

    def delete(self, location: str | InputFile | OutputFile) -> None:
        path = location if isinstance(location, str) else location.location
        self.get_fs(_scheme(path))
        self.tier.delete(str(self.tier.fs._strip_protocol(path)))


def _scheme(location: str) -> str:
    return location.split("://", 1)[0] if "://" in location else ""


class TierOutputFile(FsspecOutputFile):
    """A file of the table to be written: its bytes go to the tier when the stream closes."""

    def __init__(self, location: str, tier: RemoteTier) -> None:
        super().__init__(location, tier.fs)
        self._tier = tier

    def create(self, overwrite: bool = False) -> OutputStream:
        return _PublishOnClose(self._tier, str(self._tier.fs._strip_protocol(self.location)),
                               overwrite)


class _PublishOnClose:
    """A write-only stream that publishes what was written when closed without an error; an
    error inside its ``with`` block (or never closing it) publishes nothing."""

    def __init__(self, tier: RemoteTier, path: str, overwrite: bool) -> None:
        self._tier = tier
        self._path = path
        self._overwrite = overwrite
        self._buffer = io.BytesIO()

    @property
    def closed(self) -> bool:
        return self._buffer.closed

    def write(self, b: bytes) -> int:
        return self._buffer.write(b)

    def tell(self) -> int:
        return self._buffer.tell()

    def flush(self) -> None:
        """Nothing to do: the bytes are published on close."""

    def writable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return False

    def readable(self) -> bool:
        return False

    def close(self) -> None:
        if self.closed:
            return
        data = self._buffer.getvalue()
        self._buffer.close()
        if self._overwrite:
            self._tier.put_bytes(data, self._path)
        elif not self._tier.put_if_absent(data, self._path):
            raise FileExistsError(f"cannot create {self._path}: it exists")

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if exc_type is None:
            self.close()
        else:
            self._buffer.close()
