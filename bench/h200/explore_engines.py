"""What FlashInfer, FA3's forward (fa3-fwd) and cuDNN's frontend launch and how fast, on the lent GPU: kernel names,
grids, first-call (JIT) seconds, CUDA-event times and errors against SDPA, for the shapes the variants will call.
Run after `. bench/h200/engines_setup.sh .whl`."""
import time, traceback, math
import torch
import torch.nn.functional as F
from torch.profiler import profile, ProfilerActivity

dev = "cuda"
print(torch.__version__, torch.cuda.get_device_name(), torch.version.cuda, flush=True)


def kernels(fn, label):
    fn(); torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as p:
        fn(); torch.cuda.synchronize()
    for e in p.events():
        if e.device_type.name == "CUDA":
            grid = getattr(e, "kwinputs", {}) or {}
            print(f"  [{label}] {e.name[:150]} {e.device_time:.1f}us")
    try:
        import json, tempfile, os
        path = tempfile.mktemp(suffix=".json"); p.export_chrome_trace(path)
        ev = json.load(open(path))["traceEvents"]
        for e in ev:
            if e.get("cat") == "kernel":
                print(f"    grid {e['args'].get('grid')} block {e['args'].get('block')} regs {e['args'].get('registers per thread')} :: {e['name'][:90]}")
    except Exception as err:
        print("   trace export failed", err)


def timed(fn, n=50):
    fn(); torch.cuda.synchronize()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    for _ in range(n):
        fn()
    e.record(); torch.cuda.synchronize()
    return s.elapsed_time(e) / n


def first(fn):
    t = time.perf_counter(); out = fn(); torch.cuda.synchronize(); return out, time.perf_counter() - t


def tryit(label, fn):
    try:
        fn()
    except Exception as err:
        print(f"  !! {label}: {type(err).__name__}: {str(err).splitlines()[0][:300]}")


g = torch.Generator(device=dev).manual_seed(0)
def rnd(*shape, dtype=torch.bfloat16):
    return torch.randn(*shape, device=dev, dtype=dtype, generator=g)

B, H, S, D = 4, 16, 8192, 128
q, k, v = rnd(B, H, S, D), rnd(B, H, S, D), rnd(B, H, S, D)
ref = F.scaled_dot_product_attention(q, k, v, is_causal=True)
with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.CUDNN_ATTENTION):
    print("SDPA cuDNN 4x16x8192x128 causal ms", timed(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True)))
with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.FLASH_ATTENTION):
    print("SDPA flash ms", timed(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True)))

# ---------------- FA3 ----------------
print("\n=== FA3 (fa3-fwd)", flush=True)
def fa3_part():
    import importlib.metadata
    t = time.perf_counter(); import fa3_fwd_interface as fa3; print("import s", time.perf_counter() - t, importlib.metadata.version("fa3-fwd"))
    import fa3_fwd_config; print(fa3_fwd_config.CONFIG)
    qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))
    out, s1 = first(lambda: fa3.flash_attn_func(qt, kt, vt, causal=True))
    print("first call s", s1, type(out), "err vs sdpa", (out.transpose(1, 2) - ref).abs().max().item())
    print("ms", timed(lambda: fa3.flash_attn_func(qt, kt, vt, causal=True)))
    kernels(lambda: fa3.flash_attn_func(qt, kt, vt, causal=True), "fa3 prefill")
    # blog workload: B=8? (the app's blog: read it from the repo)
    from profiling.workload import Workload
    w = Workload.blog(); print("blog", w.words())
    # GQA decode through the KV-cache entry, heuristic splits
    Bd, Hq, Hk, Sd = 8, 32, 8, 8192
    qd, kc, vc = rnd(Bd, 1, Hq, D), rnd(Bd, Sd, Hk, D), rnd(Bd, Sd, Hk, D)
    refd = F.scaled_dot_product_attention(qd.transpose(1, 2), kc.transpose(1, 2), vc.transpose(1, 2), enable_gqa=True).transpose(1, 2)
    outd, s2 = first(lambda: fa3.flash_attn_with_kvcache(qd, kc, vc, causal=True, num_splits=0))
    print("decode first s", s2, "err", (outd - refd).abs().max().item())
    print("decode ms", timed(lambda: fa3.flash_attn_with_kvcache(qd, kc, vc, causal=True, num_splits=0)))
    kernels(lambda: fa3.flash_attn_with_kvcache(qd, kc, vc, causal=True, num_splits=0), "fa3 decode kvcache")
    # the [B,Hkv,S,D] layout seen as [B,S,Hkv,D] (a view, non-contiguous)
    kv2 = kc.transpose(1, 2).contiguous().transpose(1, 2)
    tryit("decode on a transposed view", lambda: print("view err", (fa3.flash_attn_with_kvcache(qd, kv2, kv2, causal=True, num_splits=0) - fa3.flash_attn_with_kvcache(qd, kc, kc, causal=True, num_splits=0)).abs().max().item()))
    kernels(lambda: fa3.flash_attn_func(qd, kc, vc, causal=True), "fa3 decode via flash_attn_func")
    # batch 1 long
    q1, k1, v1 = rnd(1, 1, Hq, D), rnd(1, 131072, Hk, D), rnd(1, 131072, Hk, D)
    print("decode B=1 S=128k ms", timed(lambda: fa3.flash_attn_with_kvcache(q1, k1, v1, causal=True, num_splits=0)))
    kernels(lambda: fa3.flash_attn_with_kvcache(q1, k1, v1, causal=True, num_splits=0), "fa3 decode long")
    # varlen
    lens = torch.tensor([4096, 512, 512, 512, 512, 512, 512, 512, 512], device=dev)
    cu = torch.nn.functional.pad(lens.cumsum(0), (1, 0)).to(torch.int32); T = int(lens.sum())
    qp, kp, vp = rnd(T, 16, 64), rnd(T, 16, 64), rnd(T, 16, 64)
    kernels(lambda: fa3.flash_attn_varlen_func(qp, kp, vp, cu, cu, 4096, 4096, causal=True), "fa3 varlen")
    tryit("fp16", lambda: fa3.flash_attn_func(qt.half(), kt.half(), vt.half(), causal=True))
    tryit("window", lambda: fa3.flash_attn_func(qt, kt, vt, causal=True, window_size=(255, 0)))
    tryit("backward", lambda: fa3.flash_attn_func(qt.detach().requires_grad_(), kt, vt, causal=True).sum().backward())
    tryit("D=64 rank-3 style", lambda: fa3.flash_attn_func(rnd(1, 2048, 64, 64), rnd(1, 2048, 64, 64), rnd(1, 2048, 64, 64), causal=True))
    tryit("D=80", lambda: fa3.flash_attn_func(rnd(1, 2048, 8, 80), rnd(1, 2048, 8, 80), rnd(1, 2048, 8, 80), causal=True))
tryit("fa3", fa3_part)

# ---------------- cuDNN frontend ----------------
print("\n=== cuDNN frontend", flush=True)
def cudnn_part():
    import importlib.metadata
    t = time.perf_counter(); import cudnn; f = cudnn.sdpa_torch; print("import s", time.perf_counter() - t, importlib.metadata.version("nvidia-cudnn-frontend"), cudnn.backend_version())
    out, s1 = first(lambda: f(q, k, v, is_causal=True))
    print("first s", s1, "err vs sdpa", (out - ref).abs().max().item())
    print("ms", timed(lambda: f(q, k, v, is_causal=True)))
    kernels(lambda: f(q, k, v, is_causal=True), "cudnn fe prefill")
    with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.CUDNN_ATTENTION):
        kernels(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True), "sdpa cudnn prefill")
    # decode, bottom-right
    qd, kd, vd = rnd(8, 32, 1, D), rnd(8, 8, 8192, D), rnd(8, 8, 8192, D)
    refd = F.scaled_dot_product_attention(qd, kd, vd, enable_gqa=True)
    tryit("decode bottom-right GQA", lambda: (print("decode first s", first(lambda: f(qd, kd, vd, is_causal=True, causal_bottom_right=True))[1], "err", (f(qd, kd, vd, is_causal=True, causal_bottom_right=True) - refd).abs().max().item(), "ms", timed(lambda: f(qd, kd, vd, is_causal=True, causal_bottom_right=True))), kernels(lambda: f(qd, kd, vd, is_causal=True, causal_bottom_right=True), "cudnn fe decode")))
    tryit("decode no causal", lambda: (print("nc err", (f(qd, kd, vd) - refd).abs().max().item()), kernels(lambda: f(qd, kd, vd), "cudnn fe decode nocausal")))
    tryit("window", lambda: (print("win first", first(lambda: f(q, k, v, is_causal=True, window_left=255))[1], "ms", timed(lambda: f(q, k, v, is_causal=True, window_left=255))), kernels(lambda: f(q, k, v, is_causal=True, window_left=255), "cudnn fe window")))
    def bwd():
        qq, kk, vv = (x[:, :, :2048].detach().requires_grad_() for x in (q, k, v))
        o, lse = f(qq, kk, vv, is_causal=True, return_lse=True)
        t = time.perf_counter(); o.backward(torch.ones_like(o)); torch.cuda.synchronize(); print("first bwd s", time.perf_counter() - t)
        def step():
            o, lse = f(qq, kk, vv, is_causal=True, return_lse=True); o.backward(torch.ones_like(o))
        kernels(step, "cudnn fe step")
    tryit("backward", bwd)
    lens = torch.tensor([4096, 512, 512, 512, 512, 512, 512, 512, 512], device=dev)
    cu = torch.nn.functional.pad(lens.cumsum(0), (1, 0)).to(torch.int32); T = int(lens.sum())
    qp, kp, vp = rnd(T, 16, 64), rnd(T, 16, 64), rnd(T, 16, 64)
    tryit("varlen", lambda: kernels(lambda: f(qp, kp, vp, is_causal=True, cu_seqlens_q=cu, cu_seqlens_kv=cu, max_seqlen_q=4096, max_seqlen_kv=4096), "cudnn fe varlen"))
    tryit("fp32", lambda: f(q.float()[:, :, :256], k.float()[:, :, :256], v.float()[:, :, :256]))
    tryit("rank3 as [1,BH,S,D]", lambda: f(q.reshape(1, B * H, S, D)[:, :, :1024], k.reshape(1, B * H, S, D)[:, :, :1024], v.reshape(1, B * H, S, D)[:, :, :1024], is_causal=True))
tryit("cudnn", cudnn_part)

# ---------------- FlashInfer ----------------
print("\n=== FlashInfer", flush=True)
def fi_part():
    import importlib.metadata, shutil
    print("nvcc", shutil.which("nvcc"))
    t = time.perf_counter(); import flashinfer; print("import s", time.perf_counter() - t, importlib.metadata.version("flashinfer-python"))
    Bd, Hq, Hk, Sd = 8, 32, 8, 8192
    qd = rnd(Bd, Hq, D)
    kd, vd = rnd(Bd, Hk, Sd, D), rnd(Bd, Hk, Sd, D)        # the project's [B, Hkv, S, D]: HND pages of S tokens
    refd = F.scaled_dot_product_attention(qd[:, :, None], kd, vd, enable_gqa=True)[:, :, 0]
    ws = torch.empty(128 * 2**20, dtype=torch.uint8, device=dev)
    w = flashinfer.BatchDecodeWithPagedKVCacheWrapper(ws, "HND")
    ar = torch.arange(Bd + 1, device=dev, dtype=torch.int32)
    t = time.perf_counter()
    w.plan(ar, ar[:-1].clone(), torch.full((Bd,), Sd, device=dev, dtype=torch.int32), Hq, Hk, D, Sd, q_data_type=torch.bfloat16, kv_data_type=torch.bfloat16, sm_scale=D ** -0.5)
    print("plan s", time.perf_counter() - t)
    out, s1 = first(lambda: w.run(qd, (kd, vd)))
    print("first run s (JIT)", s1, "err", (out - refd).abs().max().item())
    print("contiguous-as-HND decode ms", timed(lambda: w.run(qd, (kd, vd))))
    kernels(lambda: w.run(qd, (kd, vd)), "flashinfer decode HND")
    # paged NHD, page 16
    P = 16; pages = Bd * Sd // P
    kp = kd.transpose(1, 2).reshape(pages, P, Hk, D).contiguous(); vp = vd.transpose(1, 2).reshape(pages, P, Hk, D).contiguous()
    perm = torch.randperm(pages, device=dev, generator=g)
    kpool, vpool = torch.empty_like(kp), torch.empty_like(vp); kpool[perm] = kp; vpool[perm] = vp
    table = perm.view(Bd, Sd // P).to(torch.int32)
    w2 = flashinfer.BatchDecodeWithPagedKVCacheWrapper(ws, "NHD")
    t = time.perf_counter()
    w2.plan(ar * (Sd // P), table.flatten(), torch.full((Bd,), P, device=dev, dtype=torch.int32), Hq, Hk, D, P, q_data_type=torch.bfloat16, sm_scale=D ** -0.5)
    out2, s2 = first(lambda: w2.run(qd, (kpool, vpool)))
    print("paged first s", time.perf_counter() - t, "err", (out2 - refd).abs().max().item())
    print("paged 16 ms", timed(lambda: w2.run(qd, (kpool, vpool))))
    kernels(lambda: w2.run(qd, (kpool, vpool)), "flashinfer decode paged16")
    # tensor cores for GQA
    w3 = flashinfer.BatchDecodeWithPagedKVCacheWrapper(ws, "HND", use_tensor_cores=True)
    t = time.perf_counter()
    w3.plan(ar, ar[:-1].clone(), torch.full((Bd,), Sd, device=dev, dtype=torch.int32), Hq, Hk, D, Sd, q_data_type=torch.bfloat16, sm_scale=D ** -0.5)
    out3, s3 = first(lambda: w3.run(qd, (kd, vd)))
    print("tensor-core decode first s", time.perf_counter() - t, "err", (out3 - refd).abs().max().item(), "ms", timed(lambda: w3.run(qd, (kd, vd))))
    kernels(lambda: w3.run(qd, (kd, vd)), "flashinfer decode tc")
    # batch 1 long
    k1, v1 = rnd(1, Hk, 131072, D), rnd(1, Hk, 131072, D); q1 = rnd(1, Hq, D)
    w4 = flashinfer.BatchDecodeWithPagedKVCacheWrapper(ws, "HND")
    a1 = torch.arange(2, device=dev, dtype=torch.int32)
    w4.plan(a1, a1[:-1].clone(), torch.full((1,), 131072, device=dev, dtype=torch.int32), Hq, Hk, D, 131072, q_data_type=torch.bfloat16, sm_scale=D ** -0.5)
    tryit("long", lambda: (print("B=1 S=128k ms", timed(lambda: w4.run(q1, (k1, v1)))), kernels(lambda: w4.run(q1, (k1, v1)), "flashinfer decode long")))
    print("cache dir", flashinfer.jit.env.FLASHINFER_JIT_DIR if hasattr(flashinfer.jit, "env") else "?")
    # MHA D=64
    tryit("MHA D=64 fp16", lambda: None)
tryit("flashinfer", fi_part)
print("done", flush=True)
