"""Where compiled kernels are kept between runs of the app: a folder of its own (`~/.cache/attention-profiler`, or
under $XDG_CACHE_HOME), set for each compiler the user has not pointed elsewhere. PyTorch's inductor keeps its FX
graph, AOTAutograd and Triton kernel caches under TORCHINDUCTOR_CACHE_DIR (default /tmp/torchinductor_<user>,
gone at a reboot; Triton's kernels under its triton/<device>, unless TRITON_CACHE_DIR says otherwise: read in
torch/_inductor/runtime/cache_dir_utils.py, where the variable is read at every compile). flash_attn.cute keeps its
JIT-compiled kernels only with FLASH_ATTENTION_CUTE_DSL_CACHE_ENABLED=1, in FLASH_ATTENTION_CUTE_DSL_CACHE_DIR
(default /tmp/<user>/flash_attention_cute_dsl_cache; read once, when flash_attn.cute.cache_utils is imported: so
this runs before anything imports flash_attn). A cold cache costs each compile its full time (the README's figures);
a warm one the load of the kernels.

Importable without torch: the app and the command line call it first.
"""
from __future__ import annotations

import os
from pathlib import Path

APP_FOLDER = "attention-profiler"


def app_cache_dir() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / APP_FOLDER


def keep_compiles(root: Path | None = None) -> dict[str, str]:
    """Point each compiler's cache the user has not set at a folder under `root` (the app's by default): the
    variables set, by name. Where the folder cannot be made (a read-only home), nothing is set: the compilers'
    own defaults stand."""
    root = root or app_cache_dir()
    wanted = {"TORCHINDUCTOR_CACHE_DIR": str(root / "inductor"),
              "FLASH_ATTENTION_CUTE_DSL_CACHE_DIR": str(root / "flash_attn_cute"),
              "FLASH_ATTENTION_CUTE_DSL_CACHE_ENABLED": "1"}
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError:
        return {}
    if os.environ.get("FLASH_ATTENTION_CUTE_DSL_CACHE_DIR") or os.environ.get("FLASH_ATTENTION_CUTE_DSL_CACHE_ENABLED"):
        del wanted["FLASH_ATTENTION_CUTE_DSL_CACHE_ENABLED"]  # the user's choice about FA4's cache stands, either way
    chosen = {name: value for name, value in wanted.items() if name not in os.environ}
    os.environ.update(chosen)
    return chosen
