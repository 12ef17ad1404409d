"""What SDPA dispatched to, and PyTorch's own words for why it refused a backend."""
from __future__ import annotations

import functools
import os
import re
from dataclasses import dataclass
from typing import Mapping


from .environment import Environment
from .workload import Workload

# The SDPA op in the CPU lane says which backend ran (stable names, unlike kernel names).
SDPA_BACKEND_OPS = {
    "aten::_scaled_dot_product_flash_attention_for_cpu": "flash (CPU)",
    "aten::_scaled_dot_product_flash_attention": "flash",
    "aten::_scaled_dot_product_efficient_attention": "efficient",
    "aten::_efficient_attention_forward": "efficient",  # called directly by causal_lower_right (CausalBias._dispatch)
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


SOURCE = "https://github.com/pytorch/pytorch/blob/main/aten/src/ATen/native/transformers/cuda/sdp_utils.cpp"
DEFAULT_ORDER = ("flash", "efficient", "math", "cudnn")  # math accepts everything, so cuDNN is never reached
CUDNN_ORDER = ("cudnn", "flash", "efficient", "math")
_BACKEND_IDS = {0: "math", 1: "flash", 2: "efficient", 3: "cudnn"}  # SDPBackend values


@dataclass(frozen=True)
class Priority:
    """The order in which SDPA with no pin tries its backends, and how that order was found."""
    order: tuple[str, ...]
    rule: str                            # why cuDNN is, or is not, first on this run's GPU, in a few words
    read_live: bool = False              # read from PyTorch itself rather than predicted from the version rules
    by: str = "SDPA"                     # whose order it is: SDPA's own, or causal_lower_right's, which tries
    sdpa: "Priority | None" = None       # flash and memory-efficient itself before SDPA's own order (this, then)


def cudnn_first(env: Environment, compile_cudnn: int | None = None,
                environ: Mapping[str, str] | None = None) -> tuple[bool | None, str]:
    """Whether SDPA tries cuDNN first on `env`, and the rule that decides it, per torch release (sdp_utils.cpp,
    check_prefer_cudnn_attention). None when it depends on something the environment does not record (2.9: the
    cuDNN torch was compiled against). `environ` is the process's environment, where it is this process."""
    cc, release = env.compute_capability, env.torch_release
    if env.device != "cuda" or cc is None:
        return False, "no CUDA device"
    if cc[0] not in (9, 10):
        return False, f"cuDNN goes first only on sm9x/sm10x, never on {env.sm}"
    if release < (2, 9):
        return False, f"torch {release[0]}.{release[1]} never puts cuDNN first"
    if release == (2, 9):
        if cc[1] != 0:
            return False, f"torch 2.9 puts cuDNN first on sm90/sm100 only, not {env.sm}"
        if environ is not None and environ.get("TORCH_CUDNN_SDPA_PREFERRED") == "0":
            return False, "TORCH_CUDNN_SDPA_PREFERRED=0"
        if compile_cudnn is None:
            return None, ("torch 2.9 decides by the cuDNN it was built against (9.9 or newer), which the run did "
                          "not record")
        if compile_cudnn < 90900:
            return False, f"torch 2.9 was built against cuDNN {_cudnn_label(compile_cudnn)}, older than 9.9"
        return True, f"torch 2.9 built against cuDNN {_cudnn_label(compile_cudnn)} on {env.sm}"
    if environ is not None and environ.get("TORCH_CUDNN_SDPA_DEPRIORITIZED") == "1":
        return False, "TORCH_CUDNN_SDPA_DEPRIORITIZED=1"
    cuda13 = release >= (2, 13) and env.cuda_version is not None and int(env.cuda_version.split(".")[0]) >= 13
    minors = None if cuda13 else (0,) if release == (2, 10) else (0, 3)
    if minors is not None and cc[1] not in minors:
        return False, f"torch {release[0]}.{release[1]} puts cuDNN first on " + \
            " and ".join(f"sm{cc[0]}{m}" for m in minors) + f", not {env.sm}"
    if (env.cudnn_version or 0) <= 91500:
        return False, f"cuDNN {env.cudnn_label or 'absent'}: torch {release[0]}.{release[1]} wants 9.15.1 or newer"
    return True, f"{env.sm} with cuDNN {env.cudnn_label} (9.15.1 or newer) on torch {release[0]}.{release[1]}"


def _cudnn_label(version: int) -> str:
    return f"{version // 10000}.{version // 100 % 100}"


def is_this_process(env: Environment) -> bool:
    """Does `env` describe the GPU and torch this process runs (a live run), rather than a recording?"""
    import torch
    return (env.device == "cuda" and torch.cuda.is_available() and env.torch_version == torch.__version__
            and env.device_name == torch.cuda.get_device_name() and env.cudnn_version == torch.backends.cudnn.version())


@functools.cache
def _live_order() -> tuple[str, ...] | None:
    """The order PyTorch holds, where it exposes it. PyTorch writes the cuDNN-first order into it on its first
    backend choice, so make one choice on tiny inputs before reading."""
    import torch
    if not hasattr(torch._C, "_get_sdp_priority_order"):
        return None
    q = torch.zeros(1, 1, 8, 64, device="cuda", dtype=torch.float16)
    torch._fused_sdp_choice(q, q, q)
    return tuple(_BACKEND_IDS[i] for i in torch._C._get_sdp_priority_order() if i in _BACKEND_IDS)


BIAS_SOURCE = "https://github.com/pytorch/pytorch/blob/main/torch/nn/attention/bias.py"
LOWER_RIGHT_FIRST = ("flash", "efficient")


def priority(env: Environment, workload: Workload | None = None) -> Priority:
    """The order in which SDPA with no pin tries its backends on `env` for `workload`; the first whose checks pass
    runs. Read from PyTorch for this process where it says; predicted from the version rules for a recording. A
    causal decode step (`Workload.lower_right`) does not choose by that order: CausalBias._dispatch calls flash itself
    where `can_use_flash_attention` passes, else memory-efficient with a lower-right mask type, and only then SDPA
    with the mask materialised."""
    base = _priority(env)
    if env.device != "cuda" or workload is None or not workload.lower_right:
        return base
    rest = tuple(b for b in base.order if b not in LOWER_RIGHT_FIRST)
    return Priority(LOWER_RIGHT_FIRST + rest, "a decode step's causal_lower_right mask tries flash, then "
                    "memory-efficient, before SDPA's own order", base.read_live,
                    by="causal_lower_right", sdpa=base)


def _priority(env: Environment) -> Priority:
    import torch
    if env.device != "cuda":
        return Priority(("flash", "math"), "on CPU SDPA tries its CPU flash kernel, then math")
    if not is_this_process(env):
        first, rule = cudnn_first(env)
        return Priority(CUDNN_ORDER if first else DEFAULT_ORDER, rule)
    major, minor, patch = torch._C._cudnn.getCompileVersion() if torch.backends.cudnn.is_available() else (0, 0, 0)
    first, rule = cudnn_first(env, major * 10000 + minor * 100 + patch or None, os.environ)
    live = _live_order()
    return Priority(live, rule, read_live=True) if live else Priority(CUDNN_ORDER if first else DEFAULT_ORDER, rule)


def rank3_is_fused(env: Environment) -> bool:
    """torch 2.14 prepends a batch dim of 1 to rank-3 q/k/v before backend selection (PR #192271);
    before, every fused backend wants 4-D inputs and a rank-3 call can only take math."""
    return env.torch_release >= (2, 14)


def known_refusal(backend: str, workload: Workload, env: Environment) -> str | None:
    """The first of PyTorch's published checks (sdp_utils.cpp) that `workload` fails for `backend`, in a few
    words; None when none of those applies (PyTorch may still refuse, and then says why in its warnings)."""
    if backend == "math":
        return None
    if workload.rank == 3 and not rank3_is_fused(env):
        return f"fused kernels want 4-D q, k, v before torch 2.14 (this is {env.torch_version})"
    if env.device != "cuda":
        return None if backend == "flash" else "no CPU kernel"
    cc = env.compute_capability or (0, 0)
    d, sixteen_bit = workload.head_dim, workload.dtype in ("fp16", "bf16")
    if backend == "flash" and workload.mask != "flag":
        return "no attn_mask: FlashAttention takes none (a window or an explicit mask is one)"
    if backend == "efficient" and workload.groups > 1 and env.torch_release < (2, 14):
        return f"no grouped-query kernel before torch 2.14 (this is {env.torch_version}): k and v must have H heads"
    if backend in ("flash", "cudnn") and not sixteen_bit:
        return f"fp16 and bf16 only (the inputs are {workload.dtype})"
    if backend in ("flash", "cudnn") and cc < (8, 0):
        return f"needs sm80 or newer (this GPU is {env.sm})"
    if backend == "efficient" and workload.dtype == "bf16" and cc < (8, 0):
        return f"bf16 needs sm80 or newer (this GPU is {env.sm})"
    if backend == "flash" and d > 256:
        return f"head_dim up to 256 (it is {d})"
    if backend == "flash" and workload.training and env.sm in ("sm86", "sm87", "sm89", "sm120", "sm121") \
            and 192 < d <= 224:
        return f"no training with head_dim in (192, 224] on {env.sm} (it is {d})"
    if backend == "efficient" and cc >= (8, 0) and d % (8 if sixteen_bit else 4):
        return f"head_dim a multiple of {8 if sixteen_bit else 4} in {workload.dtype} (it is {d})"
    if backend == "cudnn":
        if d % 8:
            return f"head_dim a multiple of 8 (it is {d})"
        wide = cc == (9, 0) or cc[0] == 10  # sm90 and sm10x take up to 256 with a recent cuDNN
        if d > 256 or (d > 128 and not wide):
            return f"head_dim up to {256 if wide else 128} on {env.sm} (it is {d})"
    return None


def refusal_reasons(backend: str, warnings: list[str]) -> list[str]:
    """PyTorch's own reasons for refusing `backend` ('flash', 'efficient', 'cudnn'), from its warnings,
    without the 'has been runtime disabled' lines that only mean another backend was pinned."""
    return [reason for name, reasons in refusals(warnings).items() if backend_key(name) == backend
            for reason in reasons if "runtime disabled" not in reason]
