"""cuDNN's own frontend (PyPI `nvidia-cudnn-frontend`, `import cudnn`): `cudnn.sdpa_torch`, which builds a cuDNN graph
per configuration (cached in the process) and lets cuDNN's engine router pick the plan, on the cuDNN that torch's
wheel ships. Beside SDPA pinned to cuDNN it shows what torch's dispatch adds or changes; it also says what SDPA cannot:
a causal decode step aligned to the bottom right without a materialised mask (`causal_bottom_right`), a sliding
window as a band (`window_left`), packed documents by their cumulative lengths. An optional dependency: without it the
variant is listed as unavailable, with the reason and the install line."""
from __future__ import annotations

from typing import TYPE_CHECKING

from profiling.environment import Environment
from profiling.workload import Inputs, Workload

from .base import Variant
from .guesses import Expected, GuessRow
from .optional import Library
from .sdpa import SMALL

if TYPE_CHECKING:  # torch, imported where a variant runs: its file is read (keys, guesses, traits) without it
    import torch

LIBRARY = Library("nvidia-cudnn-frontend", "cudnn", "1.32.0", "cuDNN's frontend")
JIT_S = (0.4, 0.8)  # a configuration's first call builds its graph (0.39 s on an H100); a backward graph its own


def unavailable(w: Workload, env: Environment) -> str | None:
    reason = LIBRARY.missing()
    if reason:
        return reason
    if env.compute_capability and env.compute_capability[0] < 8:
        return f"cuDNN's fused attention needs sm80 or newer ({env.sm})"
    if w.dtype not in ("fp16", "bf16"):
        return f"cudnn.sdpa_torch runs fp16 and bf16 (and fp8 through the graph API); the inputs are {w.dtype}"
    if w.mask in ("bool", "bias"):
        return ("cudnn.sdpa_torch takes no dense mask or bias: causal (top left or bottom right), a band "
                "(window_left, window_right), sinks or sequence lengths")
    if w.page_size:
        return "cudnn.sdpa_torch takes no page table (cuDNN's graph API does, which this variant does not call)"
    if w.head_dim > 256 or w.head_dim % 8:
        return f"cuDNN's fused attention takes head dims up to 256 in steps of 8 (it is {w.head_dim})"
    return None


def cudnn_frontend_attention(x: Inputs) -> torch.Tensor:
    """[B, H, S, D] tensors as they are; a causal decode step bottom-right aligned (`causal_bottom_right`), a window
    of W keys (a query and the W-1 before it) as `window_left=W`; packed documents as [T, H, D] with their cumulative
    lengths. A training pass asks for the log-sum-exp (`return_lse`), which its backward reads."""
    import cudnn

    w = x.workload
    kwargs = dict(scale=x.scale, is_causal=w.causal, return_lse=w.training)
    if w.causal and w.queries != w.seq_len:
        kwargs["causal_bottom_right"] = True
    if w.mask == "window":  # sdpa_torch passes window_left on as cuDNN's diagonal_band_left_bound, the keys a query
        # sees counting itself ("masks j <= i-lb, i.e. lb visible tokens including self": cudnn/torch/sdpa_provider.py,
        # 1.32.0), not FlashAttention's keys before it: W-1 read one key short, an error of 0.39 on the H100
        kwargs.update(is_causal=True, window_left=w.window)
    if w.lengths is not None:
        p = x.packed()
        kwargs.update(cu_seqlens_q=p.cu_seqlens, cu_seqlens_kv=p.cu_seqlens, max_seqlen_q=p.max_len,
                      max_seqlen_kv=p.max_len)
        q, k, v = p.q, p.k, p.v
    else:
        q, k, v = x.q, x.k, x.v
        if q.dim() == 3:
            q, k, v = (t.unsqueeze(0) for t in (q, k, v))
    out = cudnn.sdpa_torch(q, k, v, **kwargs)
    out = out[0] if w.training else out
    return out.squeeze(0) if x.q.dim() == 3 and w.lengths is None else out


def _scratch(w: Workload, env: Environment) -> int:
    """An fp32 log-sum-exp per query row; a training step: dQ's fp32 accumulator, dK and dV at every query head."""
    rows = w.heads * (w.tokens if w.lengths is not None else w.batch * w.queries)
    scratch = 4 * rows + SMALL
    if w.training:
        scratch += 3 * rows * w.head_dim * 4 + 4 * rows
    return scratch


CUDNN_FRONTEND = Variant(
    key="cudnn_fe",
    label="cuDNN frontend (sdpa_torch)",
    forward=cudnn_frontend_attention,
    scratch_bytes=_scratch,
    check=unavailable, gpu_only=True,
    fused=True, sparse=True, jit_s=JIT_S, jit_measured_on="an H100", packs="packed", call="cudnn.sdpa_torch",
    no_fp8=("cudnn.sdpa_torch runs fp16 and bf16 only (cuDNN's fp8 attention is in its graph API, which this variant "
            "does not call)"),
    words={"packed": "cudnn.sdpa_torch reads the documents packed end to end with their cumulative lengths (THD)",
           # sdpa_torch's _build_graph: build_operation_graph, create_execution_plans, build_plans, cached per key
           "first_call": "built its cuDNN graph and execution plans"},
    guess=GuessRow("cuDNN without torch's dispatch: the same kernels as SDPA pinned to cuDNN, or a better plan",
        speed_rank=2, host_rank=1,
        on_cpu="a GPU library: nothing to run on a CPU",
        kernels=(Expected("cuDNN fused attention", "fused attention"),),
        backward=(Expected("cuDNN fused attention backward", "fused attention", None, "backward"),)),
)

VARIANTS = (CUDNN_FRONTEND,)
