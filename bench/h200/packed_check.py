"""Packed documents on the GPU, checked: for each way (padded SDPA pinned and auto, the block-diagonal mask, nested
jagged tensors, varlen_attn, FlexAttention's document mask, FlashAttention-4's varlen) at three batches of documents
(four equal, one long among short, many short; forward and training step), the output (and a training step's
gradients) against an fp64 reference written here, document by document; the kernels each ran and what the packed
notes say of them; the app's GPU time per call against a bare CUDA-event loop of the same call (target: within 5%);
the host cost per call beside it.

    python bench/h200/packed_check.py            # a few minutes on an H200 (flex compiles each shape, FA4 each config)
    python bench/h200/packed_check.py --quick    # the forward of the first batch only

Writes $OUT/packed_check.json (every figure) and $OUT/packed_check.txt (the table printed at the end).
"""
from __future__ import annotations

import json
import os
import sys
import time
import traceback
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from attention_variants import VARIANTS  # noqa: E402
from profiling.explain import packed_rules  # noqa: E402
from profiling.recording import MANY_SHORT, ONE_LONG, PACKED, PACKERS  # noqa: E402
from profiling.session import measure  # noqa: E402

OUT = Path(os.environ.get("OUT", "."))
SHAPES = [w.replace(passes=p) for w in (PACKED, ONE_LONG, MANY_SHORT) for p in ("fwd", "fwd+bwd")]
BARE_CALLS = 100
RULES = (packed_rules.padding_waste, packed_rules.mask_build, packed_rules.packed_kernel, packed_rules.packed_host)


def reference(x) -> tuple[torch.Tensor, dict[str, torch.Tensor] | None]:
    """fp64 attention within each document, head by head, from the padded [B, H, S, D] inputs' real rows (document b
    is row b's first L_b positions; causal: a lower triangle), every query head reading its kv head; for a training
    step its gradients by autograd for the padded output gradient's real rows. All as the documents end to end:
    [T, H, D] (dk, dv [T, Hkv, D])."""
    w = x.workload
    training = x.grad_out is not None
    outs, grads = [], {"dq": [], "dk": [], "dv": []}
    for b, n in enumerate(w.lengths):
        q, k, v = (t.detach()[b, :, :n].double().requires_grad_(training) for t in (x.q, x.k, x.v))
        heads = []
        for h in range(w.heads):
            kv = h // w.groups
            scores = q[h] @ k[kv].T / w.head_dim ** 0.5                            # [n, n]
            if w.causal:
                scores = scores.masked_fill(torch.ones(n, n, dtype=torch.bool, device=q.device).triu(1),
                                            float("-inf"))
            heads.append(torch.softmax(scores, dim=-1) @ v[kv])
        out = torch.stack(heads)                                                   # [H, n, D]
        if training:
            out.backward(x.grad_out[b, :, :n].double())
            for name, t in zip(("dq", "dk", "dv"), (q, k, v)):
                grads[name].append(t.grad.transpose(0, 1))
        outs.append(out.detach().transpose(0, 1))                                  # [n, H, D]
        del q, k, v, heads, out
    return torch.cat(outs), ({name: torch.cat(g) for name, g in grads.items()} if training else None)


def call(variant, x):
    """One call as the app times it: a forward, or a training step from gradients reset to None."""
    if x.grad_out is None:
        return variant.forward(x)
    for t in variant.leaves(x):
        t.grad = None
    out = variant.forward(x)
    out.backward(variant.grad_out(x))
    return out


def bare_ms(variant, x) -> float:
    """GPU ms per call of a plain loop of the same call, queued behind a parked GPU (so no host gap is timed)."""
    with variant.pin(), (torch.no_grad() if x.grad_out is None else torch.enable_grad()):
        for _ in range(3):
            call(variant, x)
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(int(1e8))  # ~50 ms: the host queues the calls before the GPU starts them
        start.record()
        for _ in range(BARE_CALLS):
            call(variant, x)
        end.record()
        torch.cuda.synchronize()
    return start.elapsed_time(end) / BARE_CALLS


def check(w, entry: dict, run, truth, truth_grads) -> None:
    variant = VARIANTS[run.variant]
    x = w.make_inputs()
    x = x.with_grad() if w.training else x
    with variant.pin(), (torch.no_grad() if not w.training else torch.enable_grad()):
        out = call(variant, x)
    packing = variant.packing(w)
    entry["packing"] = packing
    entry["max_abs_error_vs_fp64"] = (x.as_reference(out.detach(), packing).double() - truth).abs().max().item()
    if truth_grads is not None:
        leaves = "packed" if packing == "block" else packing
        entry["grad_errors_vs_fp64"] = {
            name: (x.as_reference(t.grad, leaves).double() - truth_grads[name]).abs().max().item()
            for name, t in zip(("dq", "dk", "dv"), variant.leaves(x))}
    entry["app_accuracy"] = run.accuracy.max_abs_error if run.accuracy else None
    entry["app_ms"] = run.timing.median_ms
    entry["bare_ms"] = bare_ms(variant, x)
    entry["app_over_bare"] = entry["app_ms"] / entry["bare_ms"]
    entry["host_ms"] = run.host_cost.median_ms if run.host_cost else None
    entry["backend"] = run.backend
    entry["kernels"] = [{"name": k.short_name, "grid": k.grid, "us": k.us_per_forward, "phase": k.phase}
                        for k in run.kernels]
    entry["notes"] = [f"{n.title} | {n.body}" for rule in RULES if (n := rule(run, {})) is not None]
    for k in run.kernels[:6]:
        print(f"   {run.variant:14s} {k.short_name[:70]:70s} {k.phase:8s} {k.us_per_forward:9.1f} µs", flush=True)
    for n in entry["notes"]:
        print(f"   {run.variant:14s} note: {n}", flush=True)


def main() -> None:
    shapes = SHAPES[:1] if "--quick" in sys.argv else SHAPES
    results = []
    t0 = time.perf_counter()
    for w in shapes:
        print(f"== {w.words()}", flush=True)
        try:
            runs = measure(w, list(PACKERS))
            truth, truth_grads = reference(w.make_inputs())
        except Exception:
            traceback.print_exc()
            continue
        for run in runs:
            entry = {"workload": w.words(), "variant": run.variant, "status": run.status, "reason": run.reason}
            try:
                if run.ok:
                    check(w, entry, run, truth, truth_grads)
            except Exception as error:
                traceback.print_exc()
                entry["check_error"] = f"{type(error).__name__}: {error}"
            results.append(entry)
            torch.cuda.empty_cache()
        del truth, truth_grads
        torch.cuda.empty_cache()
    lines = [f"{'workload':44s} {'variant':14s} {'packing':7s} {'err':>8s} {'grad err':>8s} {'app ms':>8s} "
             f"{'bare ms':>8s} {'app/bare':>8s} {'host ms':>8s} backend / first kernel"]
    for e in results:
        if e.get("app_ms"):
            grad = max(e["grad_errors_vs_fp64"].values()) if e.get("grad_errors_vs_fp64") else None
            first = e["backend"] or (e["kernels"][0]["name"] if e["kernels"] else "")
            lines.append(f"{e['workload'][:44]:44s} {e['variant']:14s} {e['packing']:7s} "
                         f"{e['max_abs_error_vs_fp64']:8.1e} {grad if grad is None else f'{grad:8.1e}'!s:>8s} "
                         f"{e['app_ms']:8.4f} {e['bare_ms']:8.4f} {e['app_over_bare']:8.3f} "
                         f"{e['host_ms'] if e['host_ms'] is None else round(e['host_ms'], 4)!s:>8s} {first[:50]}")
        else:
            lines.append(f"{e['workload'][:44]:44s} {e['variant']:14s} {e['status']:11s} "
                         f"{(e.get('reason') or e.get('check_error') or '')[:110]}")
    lines.append(f"{time.perf_counter() - t0:.0f} s in all; app/bare target: within 0.95-1.05")
    table = "\n".join(lines)
    print(table)
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "packed_check.json").write_text(json.dumps(results, indent=1, default=str))
    (OUT / "packed_check.txt").write_text(table + "\n")


if __name__ == "__main__":
    main()
