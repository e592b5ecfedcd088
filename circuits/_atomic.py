"""Writing a file all at once: to a new temporary file in the same folder, then renamed over it.

A write that fails (a full disk, an exception in the writer, a signal) leaves the previous file
as it was and no partial one; a reader never sees half a file. The temporary file is created with
``tempfile.mkstemp`` (``O_CREAT | O_EXCL``: never an existing file or a symlink planted at its
name) and the rename replaces a symlink at the destination rather than writing through it.

Kept free of other project imports so that both ``circuits`` and ``qsim_tc`` can use it.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from pathlib import Path

DEFAULT_MODE = 0o644  # a new file's permissions (an existing file's are kept)


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike, *, mode: int | None = None):
    """A temporary path beside ``path`` to write to by name; renamed to ``path`` on success.

    The temporary name keeps ``path``'s suffix, so writers that choose a format by it (matplotlib,
    numpy's ``savez``) write the same file. On an exception the temporary file is removed and
    ``path`` is left as it was.

    Args:
        path: the destination.
        mode: permissions of the result (default: those of an existing ``path``, else 0o644).

    Yields:
        The temporary file's path (a :class:`pathlib.Path`; the file exists, empty).

    Raises:
        OSError: the folder does not exist or is not writable (from creating the temporary file).
    """
    dest = Path(path)
    folder = dest.parent
    if mode is None:
        try:
            mode = stat.S_IMODE(os.stat(dest).st_mode)
        except OSError:
            mode = DEFAULT_MODE
    fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=f".tmp{dest.suffix}", dir=folder)
    os.close(fd)
    try:
        yield Path(tmp)
        os.chmod(tmp, mode)
        os.replace(tmp, dest)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def write_atomic(path: str | os.PathLike, data: str | bytes, *, mode: int | None = None) -> None:
    """Write ``data`` (text as UTF-8, or bytes) to ``path`` atomically (:func:`atomic_path`).

    Raises:
        TypeError: ``data`` is neither str nor bytes.
        OSError: the folder is missing or not writable, or the write failed (``path`` unchanged).
    """
    if isinstance(data, str):
        data = data.encode()
    elif not isinstance(data, (bytes, bytearray)):
        raise TypeError(f"data must be str or bytes, got {type(data).__name__}")
    with atomic_path(path, mode=mode) as tmp:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
