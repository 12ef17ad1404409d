"""What SDPA dispatched to, and PyTorch's own words for why it refused a backend."""
from __future__ import annotations

import re

from .environment import Environment
from .workload import Workload

# The SDPA op in the CPU lane says which backend ran (stable names, unlike kernel names).
SDPA_BACKEND_OPS = {
    "aten::_scaled_dot_product_flash_attention_for_cpu": "flash (CPU)",
    "aten::_scaled_dot_product_flash_attention": "flash",
    "aten::_scaled_dot_product_efficient_attention": "efficient",
    "aten::_scaled_dot_product_cudnn_attention": "cudnn",
    "aten::_scaled_dot_product_attention_math": "math",
    "aten::_scaled_dot_product_fused_attention_overrideable": "overrideable",
}

_TRIGGERED = re.compile(r"\s*\(Triggered internally at [^)]*\)\.?")
_HEADER = re.compile(r"^(?P<backend>.+?) (?:kernel )?not used because:?$")


def clean_warning(message: str) -> str:
    """Drop the C++ source location PyTorch appends to its warnings."""
    return _TRIGGERED.sub("", message).strip()


def refusals(warnings: list[str]) -> dict[str, list[str]]:
    """SDPA's warnings come in pairs, 'Flash attention kernel not used because:' then the reason:
    return {'Flash attention': ['Expected query, key and value to all be of dtype: ...']}."""
    reasons: dict[str, list[str]] = {}
    current = None
    for message in map(clean_warning, warnings):
        header = _HEADER.match(message)
        if header:
            current = header.group("backend")
            reasons.setdefault(current, [])
        elif current is not None:
            reasons[current].append(message)
    return reasons


# -- which backend SDPA tries first, and why it skips one --------------------------------------
def backend_key(name: str | None) -> str | None:
    """'Memory efficient' (a warning header), 'flash (CPU)' (a trace label), 'CUDNN_ATTENTION' (a pin)
    -> 'efficient', 'flash', 'cudnn'; None when it names no SDPA backend."""
    lower = (name or "").lower()
    return next((key for key in ("cudnn", "flash", "efficient", "math") if key in lower), None)


def cudnn_first(env: Environment) -> bool:
    """PyTorch moves cuDNN to the front on sm90 / sm100 (the x.0 data-centre parts) when the cuDNN it loads
    is newer than 9.15 (sdp_utils.cpp, check_prefer_cudnn_attention; TORCH_CUDNN_SDPA_DEPRIORITIZED=1 undoes it)."""
    cc = env.compute_capability
    return (env.device == "cuda" and cc is not None and cc[0] in (9, 10) and cc[1] == 0
            and (env.cudnn_version or 0) > 91500)


def priority(env: Environment) -> tuple[str, ...]:
    """The order in which SDPA with no pin tries its backends here; the first whose checks pass runs."""
    if env.device != "cuda":
        return ("flash", "math")  # CPU: _scaled_dot_product_flash_attention_for_cpu, else math
    if cudnn_first(env):
        return ("cudnn", "flash", "efficient", "math")
    return ("flash", "efficient", "math", "cudnn")  # math accepts everything, so cuDNN is never reached


def rank3_is_fused(env: Environment) -> bool:
    """torch 2.14 prepends a batch dim of 1 to rank-3 q/k/v before backend selection (PR #192271);
    before, every fused backend wants 4-D inputs and a rank-3 call can only take math."""
    return env.torch_release >= (2, 14)


def known_refusal(backend: str, workload: Workload, env: Environment) -> str | None:
    """The first of PyTorch's published checks that `workload` fails for `backend`, in a few words;
    None when none of those applies (PyTorch may still refuse, and then says why in its warnings)."""
    if backend == "math":
        return None
    if workload.rank == 3 and not rank3_is_fused(env):
        return f"fused kernels want 4-D q, k, v before torch 2.14 (this is {env.torch_version})"
    if env.device != "cuda":
        return None if backend == "flash" else "no CPU kernel"
    cc = env.compute_capability or (0, 0)
    if backend in ("flash", "cudnn") and workload.dtype == "fp32":
        return "fp16 and bf16 only (the inputs are fp32)"
    if backend in ("flash", "cudnn") and cc < (8, 0):
        return f"needs sm80 or newer (this GPU is {env.sm})"
    if backend == "efficient" and workload.dtype == "bf16" and cc < (8, 0):
        return f"bf16 needs sm80 or newer (this GPU is {env.sm})"
    if backend == "flash" and workload.head_dim > 256:
        return f"head_dim up to 256 (it is {workload.head_dim})"
    return None


def refusal_reasons(backend: str, warnings: list[str]) -> list[str]:
    """PyTorch's own reasons for refusing `backend` ('flash', 'efficient', 'cudnn'), from its warnings,
    without the 'has been runtime disabled' lines that only mean another backend was pinned."""
    return [reason for name, reasons in refusals(warnings).items() if backend_key(name) == backend
            for reason in reasons if "runtime disabled" not in reason]
