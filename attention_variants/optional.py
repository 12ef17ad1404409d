"""An optional library a variant calls (FlashAttention-4, FA3's forward, FlashInfer, cuDNN's frontend): whether it is
installed, whether it imports, and the one line that says how to add it. Nothing here imports the library until a
variant asks whether it can run (`missing`), and then once per process."""
from __future__ import annotations

import functools
import importlib
import importlib.metadata
from dataclasses import dataclass


@dataclass(frozen=True)
class Library:
    dist: str          # its name on PyPI
    module: str        # what its users import
    pin: str           # the release seen working on the lent GPU (torch 2.11.0+cu130)
    what: str          # how the app names it ("FlashInfer")

    def version(self) -> str | None:
        try:
            return importlib.metadata.version(self.dist)
        except importlib.metadata.PackageNotFoundError:
            return None

    def install_line(self) -> str:
        return f'pip install "{self.dist}=={self.pin}"'

    def missing(self) -> str | None:
        """Why it cannot be called here (not installed, or its import fails), in one line; None when it can."""
        version = self.version()
        if version is None:
            return f"{self.dist} is not installed (an optional dependency); to add it: {self.install_line()}"
        error = _import_error(self.module)
        return f"import {self.module} ({self.dist} {version}) failed: {error}" if error else None


IMPORTED: set[str] = set()  # the optional libraries this process imported (`imported`)


@functools.cache
def _import_error(module: str) -> str | None:
    """Import `module` once (no CUDA call, no JIT): the error in one line, or None."""
    try:
        importlib.import_module(module)
    except Exception as error:  # ImportError, an OSError from a bundled library, a loader's RuntimeError
        return f"{type(error).__name__}: {error}".splitlines()[0]
    IMPORTED.add(module)
    return None


def imported() -> bool:
    """Whether this process imported an optional library: its teardown at the interpreter's exit is its own (one held
    a process that had written all it had to for minutes: `profiling.__main__`)."""
    return bool(IMPORTED)
