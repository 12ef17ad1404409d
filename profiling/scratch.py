"""The per-process scratch folders under the system's temp dir, and nothing else the app may serve.

Each process writes into folders named `attention_profiler_<pid>` (the measurement's traces) and
`attention_profiler_<kind>_<pid>` (the app's downloads). A process that crashed or was restarted
leaves its folders behind; `clean_stale_folders` removes those whose process is gone. A pid does not
say so (a temp dir shared across PID namespaces, as containers share it, holds live folders under pids
dead here, or alive as another process): each process holds an exclusive flock on a lock file in each
folder it owns while it lives, and a folder is stale only when its lock can be taken. A folder without
one is never judged gone (where there is flock). The command line removes its own folders as its
command ends (`remove_own_folders`): what it measured is printed or written where the user said.
"""
from __future__ import annotations

import logging
import os
import re
import shutil
import stat
import tempfile
import threading
import time
from pathlib import Path

try:
    import fcntl
except ImportError:  # Windows: no flock; a folder is judged by its pid and age alone
    fcntl = None

PREFIX = "attention_profiler_"
LOCK_NAME = ".lock"
_FOLDER = re.compile(rf"^{PREFIX}(?:[a-z]+_)?(\d+)$")
_log = logging.getLogger(__name__)
_held: dict[Path, int] = {}  # a lock file of this process's folders -> its descriptor, held (locked) until exit
_holding = threading.Lock()


def process_folder(kind: str = "") -> Path:
    """This process's folder for `kind` ("views"; none for the measurement's traces), created on first use and
    locked while the process lives."""
    folder = Path(tempfile.gettempdir()) / f"{PREFIX}{kind}{'_' if kind else ''}{os.getpid()}"
    folder.mkdir(mode=0o700, exist_ok=True)
    if fcntl is not None:
        with _holding:
            _hold(folder / LOCK_NAME)
    return folder


def _hold(lock: Path) -> None:
    """Take the lock of a folder of this process, unless it holds it already (it may have been removed by hand, or
    by the system's temp cleaner, and made again: then its new lock)."""
    held = _held.get(lock)
    try:
        if held is not None and os.path.samestat(os.fstat(held), os.lstat(lock)):
            return
    except FileNotFoundError:
        pass
    fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:  # a live process of the same pid in another PID namespace holds it: its folder too
        os.close(fd)
        return
    if held is not None:
        os.close(held)
    _held[lock] = fd


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive
        return True
    return True


def clean_stale_folders(root: str | Path | None = None, min_age_s: float = 300) -> list[Path]:
    """Remove the scratch folders of processes that no longer run; returns what was removed. Only what this user
    owns and this module names is touched; a link is unlinked, never followed.

    A folder with a lock file is stale when its lock can be taken (it is removed holding it) and the lock file is
    `min_age_s` old (a younger one may be a process's between creating it and locking it). Where there is flock,
    nothing else is: a folder without a lock (made before folders had locks, or by hand) or an entry that is no
    folder names no owner that can be seen gone (its pid dead here may live in another PID namespace). Without
    flock (Windows, one PID namespace) an entry goes when its pid is dead and it is untouched for `min_age_s`."""
    root = Path(root or tempfile.gettempdir())
    removed = []
    try:
        entries = list(root.iterdir())
    except OSError:
        return removed
    for path in entries:
        match = _FOLDER.match(path.name)
        if not match or int(match.group(1)) == os.getpid():
            continue
        try:
            info = path.lstat()
            if info.st_uid != os.getuid():
                continue
            lock = _lock_of(path) if stat.S_ISDIR(info.st_mode) and fcntl is not None else None
            if lock is not None:
                if time.time() - lock.st_mtime < min_age_s:
                    continue
                fd = os.open(path / LOCK_NAME, os.O_RDONLY | os.O_NOFOLLOW)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # BlockingIOError: its process is alive
                    shutil.rmtree(path)
                finally:
                    os.close(fd)
            elif fcntl is not None or _alive(int(match.group(1))) or time.time() - info.st_mtime < min_age_s:
                continue
            elif stat.S_ISDIR(info.st_mode):
                shutil.rmtree(path)
            else:
                path.unlink()
            removed.append(path)
        except OSError:  # alive, removed meanwhile, or not ours to remove
            continue
    return removed


def remove_own_folders(root: str | Path | None = None) -> None:
    """Remove this process's scratch folders, releasing their locks (the command line's, as its command ends: the
    traces its measurements left, which its tables were read from). A later `process_folder` makes them afresh."""
    root, pid = Path(root or tempfile.gettempdir()), os.getpid()
    with _holding:
        for lock, fd in list(_held.items()):
            if lock.parent.parent == root:
                os.close(fd)
                del _held[lock]
    for path in root.glob(f"{PREFIX}*{pid}"):
        match = _FOLDER.match(path.name)
        if match and int(match.group(1)) == pid and path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)


def _lock_of(folder: Path) -> os.stat_result | None:
    """The lock file of a scratch folder (lstat), or None where it has none."""
    try:
        return (folder / LOCK_NAME).lstat()
    except FileNotFoundError:
        return None


def is_scratch_file(path: str | Path) -> bool:
    """Whether `path` is a plain file directly inside one of the scratch folders (a trace the measurement
    wrote: on ZeroGPU from a forked worker, hence any pid)."""
    path = Path(path)
    try:
        resolved = path.resolve(strict=True)
    except (OSError, RuntimeError):
        return False
    folder = resolved.parent
    return (resolved.is_file() and not path.is_symlink() and _FOLDER.match(folder.name) is not None
            and folder.parent == Path(tempfile.gettempdir()).resolve())


_views_lock = threading.Lock()


def view_folder(keep: int = 32) -> Path:
    """A fresh folder for one view's downloads; the oldest beyond `keep` are removed, so the disk stays bounded.
    Views are made from several threads at once: one lock, and a folder another removed meanwhile is skipped, as is
    an entry that cannot be read (a symlink loop put there), in one log line."""
    root = process_folder("views")
    with _views_lock:
        aged = []
        for folder in root.iterdir():
            try:
                aged.append((folder.stat().st_mtime, folder))
            except FileNotFoundError:  # removed meanwhile
                continue
            except OSError as error:  # a link that loops, or one it may not read: not a view, skipped
                _log.warning("views folder: skipped %s (%s)", folder.name, error.strerror or error)
        for _, old in sorted(aged)[:-keep]:
            shutil.rmtree(old, ignore_errors=True)
        return Path(tempfile.mkdtemp(dir=root))
