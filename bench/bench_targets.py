"""On a GPU: the issues' targets, measured.

1. The app's GPU times (forward, backward, a sliding window, FlashAttention-4) against bare CUDA-event loops written
   here, with no project code in the timed path: within 5%?
2. The verdict's stability: live comparisons repeated 10 times (auto vs flex, flash vs cuDNN at the blog workload):
   the same order and a ratio within ±10% each time; cuDNN vs auto (the same kernel) and A vs A never ranked.
3. A warm comparison of two fused variants, forward + backward, through the front door (`session.compare`, which the
   API calls): its wall time.

4. The serving engines' kernels (FA3's forward, cuDNN's frontend, FlashInfer's decode) against bare loops of their
   own calls, beside SDPA's, with their kernels and errors (`engines`).

    python bench/bench_targets.py [bare|verdict|warm|engines ...]     # FA4_SITE=/tmp/site: flash-attn-4 installed there
"""
from __future__ import annotations

import os
import site
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
if os.environ.get("FA4_SITE"):
    site.addsitedir(os.environ["FA4_SITE"])

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402

BLOG = dict(batch=8, heads=16, seq_len=1024, head_dim=64)
PINS = {"sdpa_math": SDPBackend.MATH, "sdpa_efficient": SDPBackend.EFFICIENT_ATTENTION,
        "sdpa_flash": SDPBackend.FLASH_ATTENTION, "sdpa_cudnn": SDPBackend.CUDNN_ATTENTION}


# -- bare calls, written here as a user writes them ------------------------------------------------------------
def bare_call(key: str, q, k, v, window: int | None):
    s = q.shape[-2]
    if key in ("naive", "naive_inplace"):
        hidden = torch.ones(s, s, dtype=torch.bool, device="cuda").triu(1)
        def call():
            scores = (q @ k.transpose(-2, -1)) * q.shape[-1] ** -0.5
            scores = scores.masked_fill(hidden, float("-inf")) if key == "naive" else scores.masked_fill_(hidden, float("-inf"))
            return torch.softmax(scores, dim=-1) @ v
        return call
    if key == "flex":
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention
        def mask_mod(b, h, qi, ki):
            return (qi >= ki) & (qi - ki < window) if window else qi >= ki
        block = create_block_mask(mask_mod, None, None, s, s, device="cuda")
        compiled = torch.compile(flex_attention, dynamic=False)
        return lambda: compiled(q, k, v, block_mask=block)
    if key == "fa4":
        from flash_attn.cute import flash_attn_func
        qt, kt, vt = (t.transpose(1, 2) for t in (q, k, v))
        size = (window - 1, 0) if window else (None, None)
        return lambda: flash_attn_func(qt, kt, vt, causal=True, window_size=size)[0].transpose(1, 2)
    if window:
        i = torch.arange(s, device="cuda")
        allowed = (i[:, None] >= i[None, :]) & (i[:, None] - i[None, :] < window)
        return lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)
    return lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True)


def parked_event_ms(timed, reps: int = 50, before=lambda: None, warmup: int = 5) -> float:
    """Median of CUDA-event samples of `timed()`, each taken with the GPU parked first (the events time its work, not
    the host's), after `before()` (untimed) and `warmup` samples thrown away."""
    times = []
    for i in range(reps + warmup):
        before()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        torch.cuda._sleep(2_000_000)
        start.record()
        timed()
        end.record()
        torch.cuda.synchronize()
        if i >= warmup:
            times.append(start.elapsed_time(end))
    return statistics.median(times)


def bare_ms(key: str, w: dict, backward: bool, window: int | None = None, reps: int = 50) -> float:
    """Median of CUDA-event samples, the forward (no_grad) or the backward alone (events around .backward())."""
    g = torch.Generator(device="cuda").manual_seed(1)
    shape = (w["batch"], w["heads"], w["seq_len"], w["head_dim"])
    q, k, v = (torch.randn(shape, generator=g, device="cuda", dtype=torch.bfloat16, requires_grad=backward)
               for _ in range(3))
    grad = torch.randn(shape, device="cuda", dtype=torch.bfloat16)
    pin = sdpa_kernel(PINS[key]) if key in PINS else sdpa_kernel(list(PINS.values()))
    with pin, (torch.enable_grad() if backward else torch.no_grad()):
        call = bare_call(key, q, k, v, window)
        if not backward:
            return parked_event_ms(call, reps)
        held = {}

        def forward():  # untimed: the graph the timed backward walks
            for t in (q, k, v):
                t.grad = None
            held["out"] = call()
        return parked_event_ms(lambda: held["out"].backward(grad), reps, before=forward)


def app_ms(key: str, w: dict, backward: bool, window: int | None = None) -> tuple[float | None, str]:
    from profiling.session import measure
    from profiling.workload import Workload
    workload = Workload(**w, passes="fwd+bwd" if backward else "fwd",
                        **({"mask": "window", "window": window} if window else {}))
    (run,) = measure(workload, [key])
    if not run.ok:
        return None, run.status
    return (run.backward_timing if backward else run.timing).median_ms, run.status


def bare() -> None:
    print("== the app's GPU time against a bare CUDA-event loop (ms, median) ==")
    print(f"{'variant':15s} {'what':28s} {'app':>9s} {'bare':>9s} {'diff':>7s}")
    cases = [(k, BLOG, True, None, "backward, blog") for k in
             ("naive", "naive_inplace", "sdpa_math", "sdpa_efficient", "sdpa_flash", "sdpa_cudnn", "sdpa_auto",
              "flex", "fa4")]
    cases += [(k, dict(batch=1, heads=16, seq_len=s, head_dim=128), False, 1024, f"window 1024, S={s}")
              for k in ("sdpa_auto", "flex", "fa4") for s in (4096, 16384)]
    cases += [("fa4", BLOG, False, None, "forward, blog"),
              ("fa4", dict(batch=1, heads=32, seq_len=16384, head_dim=128), False, None, "forward, 1x32x16384x128")]
    for key, w, backward, window, what in cases:
        try:
            app, status = app_ms(key, w, backward, window)
            if app is None:
                print(f"{key:15s} {what:28s} {status}")
                continue
            ref = bare_ms(key, w, backward, window)
            print(f"{key:15s} {what:28s} {app:9.3f} {ref:9.3f} {100 * (app / ref - 1):+6.1f}%", flush=True)
        except Exception as error:  # one line, the table goes on
            print(f"{key:15s} {what:28s} failed: {str(error).splitlines()[0][:90]}", flush=True)


# -- the serving engines' kernels (FA3's forward, cuDNN's frontend, FlashInfer), called bare as their users call them
def e4m3(t):
    """`t` quantised per tensor to e4m3 as a deployment does (amax to 448), and its fp32 descale."""
    scale = t.abs().amax().float().clamp(min=1e-12) / 448.0
    return (t.float() / scale).to(torch.float8_e4m3fn), scale


def engine_call(key: str, w: dict, q, k, v):
    """q [B, H, Lq, D], k and v [B, Hkv, S, D] (bf16), causal bottom-right where Lq < S; the fp8 twins quantise
    here, outside the timed call (q, k, v in e4m3 with descales; FlashInfer's cache in e4m3 with k/v scales)."""
    decode = q.shape[2] != k.shape[2]
    if key in ("fa3", "fa3_fp8"):
        import fa3_fwd_interface as fa3
        extra = {}
        if key == "fa3_fp8":
            (q, sq), (k, sk), (v, sv) = e4m3(q), e4m3(k), e4m3(v)
            rows, heads = q.shape[0], k.shape[1]
            extra = {f"{n}_descale": s.reshape(1, 1).expand(rows, heads).contiguous()
                     for n, s in (("q", sq), ("k", sk), ("v", sv))}
        qt, kt, vt = (t.transpose(1, 2) for t in (q, k, v))
        if decode:
            return lambda: fa3.flash_attn_with_kvcache(qt, kt, vt, causal=True, num_splits=0, **extra)
        return lambda: fa3.flash_attn_func(qt, kt, vt, causal=True, **extra)
    if key == "cudnn_fe":
        import cudnn
        extra = {"causal_bottom_right": True} if decode else {}
        return lambda: cudnn.sdpa_torch(q, k, v, is_causal=True, **extra)
    if key in ("flashinfer", "flashinfer_fp8"):
        import flashinfer
        scaled = {}
        if key == "flashinfer_fp8":
            (k, sk), (v, sv) = e4m3(k), e4m3(v)
            scaled = {"k_scale": sk.item(), "v_scale": sv.item()}
        b, h, _, d = q.shape
        hkv, s = k.shape[1], k.shape[2]
        ws = torch.empty(128 * 2**20, dtype=torch.uint8, device="cuda")
        i = torch.arange(b + 1, device="cuda", dtype=torch.int32)
        page = w.get("page_size")
        if page:
            pages = torch.randperm(b * s // page, device="cuda")
            kp = torch.empty(b * s // page, page, hkv, d, device="cuda", dtype=k.dtype)
            vp = torch.empty_like(kp)
            kp[pages] = k.transpose(1, 2).reshape(-1, page, hkv, d)
            vp[pages] = v.transpose(1, 2).reshape(-1, page, hkv, d)
            wrapper = flashinfer.BatchDecodeWithPagedKVCacheWrapper(ws, "NHD")
            wrapper.plan(i * (s // page), pages.to(torch.int32), torch.full((b,), page, device="cuda", dtype=torch.int32),
                         h, hkv, d, page, q_data_type=q.dtype, kv_data_type=k.dtype)
            cache = (kp, vp)
        else:  # the contiguous cache as HND pages of 16 tokens, in place: page j of row b at b·Hkv·S/16 + j
            per = s // 16
            view = [t.as_strided(((b - 1) * hkv * per + per, hkv, 16, d), (16 * d, s * d, d, 1)) for t in (k, v)]
            wrapper = flashinfer.BatchDecodeWithPagedKVCacheWrapper(ws, "HND")
            pages = (torch.arange(b, device="cuda")[:, None] * hkv * per + torch.arange(per, device="cuda")).flatten()
            wrapper.plan(i * per, pages.to(torch.int32), torch.full((b,), 16, device="cuda", dtype=torch.int32), h,
                         hkv, d, 16, q_data_type=q.dtype, kv_data_type=k.dtype)
            cache = tuple(view)
        q3 = q[:, :, 0]
        return lambda: wrapper.run(q3, cache, **scaled)
    if decode:
        from torch.nn.attention.bias import causal_lower_right
        mask = causal_lower_right(q.shape[2], k.shape[2])
        def call():
            with sdpa_kernel(PINS[key]):
                return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
        return call
    def call():
        with sdpa_kernel(PINS[key]):
            return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    return call


def engine_bare_ms(key: str, w: dict, reps: int = 50) -> float:
    g = torch.Generator(device="cuda").manual_seed(1)
    b, h, s, d = w["batch"], w["heads"], w["seq_len"], w["head_dim"]
    hkv, lq = w.get("kv_heads") or h, w.get("q_len") or s
    q = torch.randn(b, h, lq, d, generator=g, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(b, hkv, s, d, generator=g, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    call = engine_call(key, w, q, k, v)
    with torch.no_grad():
        return parked_event_ms(call, reps)


ENGINE_CASES = (
    ("forward, blog", BLOG, ("fa3", "cudnn_fe", "sdpa_cudnn")),
    ("forward, 4x16x8192x128", dict(batch=4, heads=16, seq_len=8192, head_dim=128), ("fa3", "cudnn_fe", "sdpa_cudnn")),
    ("decode 8x32/8 S=8192", dict(batch=8, heads=32, kv_heads=8, seq_len=8192, head_dim=128, q_len=1),
     ("fa3", "flashinfer", "cudnn_fe", "sdpa_cudnn", "sdpa_flash")),
    ("decode 1x32/8 S=131072", dict(batch=1, heads=32, kv_heads=8, seq_len=131072, head_dim=128, q_len=1),
     ("fa3", "flashinfer", "cudnn_fe")),
    ("decode paged 16", dict(batch=8, heads=32, kv_heads=8, seq_len=8192, head_dim=128, q_len=1, page_size=16),
     ("flashinfer",)),
    # the fp8 twins (issue 55), each beside its bf16 self: the app quantises the same way, outside the timed call
    ("fp8, blog", BLOG, ("fa3", "fa3_fp8")),
    ("fp8, 1x16x16384x128", dict(batch=1, heads=16, seq_len=16384, head_dim=128), ("fa3", "fa3_fp8")),
    ("fp8, decode 8x32/8 S=8192", dict(batch=8, heads=32, kv_heads=8, seq_len=8192, head_dim=128, q_len=1),
     ("fa3", "fa3_fp8", "flashinfer", "flashinfer_fp8")),
)


def engines() -> None:
    from profiling.session import measure
    from profiling.workload import Workload
    print("== the serving engines' kernels: the app's GPU time against a bare CUDA-event loop (ms, median) ==")
    print(f"{'variant':15s} {'what':28s} {'app':>9s} {'bare':>9s} {'diff':>7s}")
    for what, w, keys in ENGINE_CASES:
        runs = {r.variant: r for r in measure(Workload(**w), list(keys))}
        for key in keys:
            run = runs[key]
            if not run.ok:
                print(f"{key:15s} {what:28s} {run.status}: {(run.reason or '')[:100]}", flush=True)
                continue
            try:
                ref = engine_bare_ms(key, w)
                print(f"{key:15s} {what:28s} {run.gpu_ms:9.4f} {ref:9.4f} {100 * (run.gpu_ms / ref - 1):+6.1f}%  "
                      f"err {run.accuracy.max_abs_error:.2g} · {', '.join(k.short_name for k in run.kernels)[:110]}",
                      flush=True)
            except Exception as error:  # one line, the table goes on
                print(f"{key:15s} {what:28s} bare loop failed: {str(error).splitlines()[0][:90]}", flush=True)


def verdict() -> None:
    from profiling import session
    from profiling.request import Request
    print("== live verdicts, 10 repeats each (blog workload) ==")
    for a, b in (("sdpa_auto", "flex"), ("sdpa_flash", "sdpa_cudnn"), ("sdpa_cudnn", "sdpa_auto"),
                 ("sdpa_flash", "sdpa_flash")):
        said = []
        for _ in range(10):
            answer = session.compare(Request.build("live", a, b, {}, "cuda"))
            h = answer.explanation.headline
            said.append((h.title.split(" on the ")[0], h.facts.get("ratio").value if "ratio" in h.facts else None))
        ratios = [r for _, r in said if r]
        kinds = sorted({t for t, _ in said})
        spread = f"ratio {min(ratios):.3f}–{max(ratios):.3f} ({100 * (max(ratios) / min(ratios) - 1):.1f}%)" if ratios else ""
        print(f"{a} vs {b}: {len(kinds)} distinct headline(s) {spread}")
        for k in kinds:
            print(f"   {sum(t == k for t, _ in said)}× {k}")


def warm() -> None:
    from profiling import session
    from profiling.request import Request
    print("== a warm forward + backward comparison through the front door ==")
    for a, b in (("sdpa_flash", "sdpa_cudnn"), ("sdpa_cudnn", "fa4")):
        request = Request.build("live", a, b, {"passes": "fwd+bwd"}, "cuda")
        session.compare(request)  # cold: plans, compiles
        walls = []
        for _ in range(3):
            t0 = time.perf_counter()
            session.compare(request)
            walls.append(time.perf_counter() - t0)
        print(f"{a} vs {b}, B=8 H=16 S=1024 D=64 bf16 causal, forward + backward: warm {min(walls):.2f}–{max(walls):.2f} s")


if __name__ == "__main__":
    steps = sys.argv[1:] or ["bare", "verdict", "warm"]
    for step in steps:
        {"bare": bare, "verdict": verdict, "warm": warm, "engines": engines}[step]()
