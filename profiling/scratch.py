"""The per-process scratch folders under the system's temp dir, and nothing else the app may serve.

Each process writes into folders named `attention_profiler_<pid>` (the measurement's traces) and
`attention_profiler_<kind>_<pid>` (the app's downloads). A process that crashed or was restarted
leaves its folders behind; `clean_stale_folders` removes those whose process is gone.
"""
from __future__ import annotations

import os
import re
import shutil
import tempfile
import threading
import time
from pathlib import Path

PREFIX = "attention_profiler_"
_FOLDER = re.compile(rf"^{PREFIX}(?:[a-z]+_)?(\d+)$")


def process_folder(kind: str) -> Path:
    """This process's folder for `kind` (e.g. "views"), created on first use."""
    folder = Path(tempfile.gettempdir()) / f"{PREFIX}{kind}_{os.getpid()}"
    folder.mkdir(mode=0o700, exist_ok=True)
    return folder


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive
        return True
    return True


def clean_stale_folders(root: str | Path | None = None, min_age_s: float = 300) -> list[Path]:
    """Remove the scratch folders of processes that no longer run; returns what was removed.
    Only folders this user owns, named as this module names them and untouched for `min_age_s` (a temp dir
    shared with another PID namespace may hold a live process's folder under a pid dead here) are touched;
    a link is unlinked, never followed."""
    root = Path(root or tempfile.gettempdir())
    removed = []
    try:
        entries = list(root.iterdir())
    except OSError:
        return removed
    for path in entries:
        match = _FOLDER.match(path.name)
        if not match or int(match.group(1)) == os.getpid() or _alive(int(match.group(1))):
            continue
        try:
            info = path.lstat()
            if info.st_uid != os.getuid() or time.time() - info.st_mtime < min_age_s:
                continue
            if path.is_symlink() or not path.is_dir():
                path.unlink()
            else:
                shutil.rmtree(path)
            removed.append(path)
        except OSError:  # removed meanwhile, or not ours to remove
            continue
    return removed


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
    Views are made from several threads at once: one lock, and a folder another removed meanwhile is skipped."""
    root = process_folder("views")
    with _views_lock:
        aged = []
        for folder in root.iterdir():
            try:
                aged.append((folder.stat().st_mtime, folder))
            except FileNotFoundError:
                continue
        for _, old in sorted(aged)[:-keep]:
            shutil.rmtree(old, ignore_errors=True)
        return Path(tempfile.mkdtemp(dir=root))
