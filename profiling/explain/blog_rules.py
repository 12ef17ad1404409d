"""The blog's A100: each run beside the post's number for the same variant (on the post's workload only),
and what a different GPU generation changes in the kernels' names and the ranking.
"""
from __future__ import annotations

from attention_variants import VARIANTS

from .. import text
from ..reference import BLOG
from ..results import Note, Run
from .facts import (Peers, ampere_design, constant, hopper_design, kernels_in, label, main_kernel, measured, note,
                    on_gpu, rankable, ratio, scaled, share_of, sm_in_name)


def _blog_fused(key: str) -> bool:
    """A fused variant the blog ranked (the one definition of fused is the variant's own)."""
    return key in BLOG.results and key in VARIANTS and VARIANTS[key].fused


def _unlike_blog(run: Run) -> str:
    differences = BLOG.differences(run.workload)
    if len(differences) > 3:  # every difference named, by its field alone (a card holds 60 words)
        names = [d.split(" ")[0] for d in differences]
        return f" (This workload differs from the blog's in {', '.join(names[:-1])} and {names[-1]}.)"
    return f" (This workload differs from the blog's: {', '.join(differences)}.)" if differences else ""


def against_blog(run: Run, peers: Peers) -> Note | None:
    """This run beside the blog's A100 figures for the same variant, on the blog's workload."""
    ref = BLOG.results.get(run.variant)
    if not on_gpu(run) or ref is None or not BLOG.matches(run.workload):
        return None
    key = f"blog.results[{run.variant}]"
    on = text.on_device(run.environment)
    facts, said = {}, []
    if ref.kernels_per_forward is not None and run.kernels_per_forward is not None:
        facts |= {"kernels": measured(run, "kernels_per_forward", "count"),
                  "blog_kernels": constant(ref.kernels_per_forward, "count", f"{key}.kernels_per_forward")}
        said.append(f"Kernels per forward: {{kernels}} {on}, {{blog_kernels}} on the A100.")
    if ref.gpu_us and run.gpu_ms and rankable(run):  # a wrong answer's speed is said beside no other's
        here = scaled(measured(run, "timing.median_ms", "ms"), 1000, "us")
        facts |= {"gpu": measured(run, "timing.median_ms", "ms"),
                  "blog_gpu": constant(ref.gpu_us / 1000, "ms", f"product({key}.gpu_us, 0.001)"),
                  "speed": ratio(constant(ref.gpu_us, "us", f"{key}.gpu_us"), here)}
        faster = facts["speed"].value >= 1
        if not faster:
            facts["speed"] = ratio(here, constant(ref.gpu_us, "us", f"{key}.gpu_us"))
        said.append(f"{{gpu}} per forward {on}, {{blog_gpu}} on the A100: {{speed}} "
                    + ("faster" if faster else "slower") + ".")
    for pair in BLOG.compared:  # the post's own side-by-side pairs, this run's side of one
        other = peers.get(pair.than)
        if pair.variant != run.variant or not (other and other.gpu_ms and ref.gpu_us and rankable(run)):
            continue
        facts |= {"here": ratio(measured(run, "timing.median_ms", "ms"),
                                measured(other, "timing.median_ms", "ms", f"peers[{pair.than}]")),
                  "there": ratio(constant(ref.gpu_us, "us", f"{key}.gpu_us"),
                                 constant(BLOG.results[pair.than].gpu_us, "us", f"blog.results[{pair.than}].gpu_us"))}
        said.append(pair.words + f" {on}, {{there}} on the A100.")
    if not said:
        return None
    cc, there = run.environment.compute_capability, BLOG.compute_capability
    return note("against_blog", "reference", "Beside the blog's A100 (same workload)",
                " ".join(said), weight=0.08, facts=facts,
                evidence=[f"the post's lesson there: {ref.finding}",
                          f"the blog: {BLOG.title}, on one {BLOG.device_name}; {BLOG.method}",
                          f"the A100's kernels: {', '.join(ref.kernels)}",
                          f"compute capability {cc[0]}.{cc[1]} {on}, {there[0]}.{there[1]} on the A100: kernel lists "
                          "and ratios carry over between GPUs better than times"])


def kernel_generation(run: Run, peers: Peers) -> Note | None:
    """Kernels written for Ampere (mma.sync, cp.async) and compiled for this newer GPU too: they run, but without
    Hopper's wgmma and TMA. For FFMA GEMMs the limit is FP32 throughput, not the generation."""
    sm = run.environment.sm
    cc = run.environment.compute_capability
    older = [k for k in run.kernels_of() if ampere_design(k)]
    if not on_gpu(run) or not older or cc is None or cc < (9, 0):
        return None
    ffma = [k for k in older if "ffma" in k.name.lower()]
    tensor = [k for k in older if k not in ffma]
    facts = {"share": share_of(run, older, run.phase)}
    names = {"sm": sm, "kernel": text.kernel(max(older, key=lambda k: k.us_per_forward), 40),
             "on": text.on_device(run.environment)}
    if tensor:
        design = " (mma.sync, cp.async)" if run.workload.dtype in ("fp16", "bf16") else ""
        body = ("{kernel} is an Ampere-design kernel" + design + ", compiled for {sm} too: it runs {on} without "
                "Hopper's wgmma and TMA, which kernels written for {sm} use. Such kernels run {share}.")
    else:
        body = ("Its GEMMs are Ampere-design kernels (sm80 in the name) doing FFMA on FP32 CUDA cores: {on} the "
                "limit is FP32 throughput, not the generation; TF32 or 16-bit inputs are the cure, not {sm} kernels.")
    return note("kernel_generation", "reference", "Ampere-design kernels on {sm}", body + _unlike_blog(run),
                weight=0.12 * facts["share"].value if tensor else 0.05, facts=facts, names=names, kernels=older,
                evidence=[f"{text.kernel_line(k)} · " + (f"name says {sm_in_name(k)}" if sm_in_name(k)
                                                           else "PyTorch's FlashAttention-2 kernel") for k in older])


def nvjet_gemms(run: Run, peers: Peers) -> Note | None:
    """cuBLAS on Hopper and newer runs its nvjet GEMMs: other names than the blog's A100 trace shows."""
    nvjet = [k for k in kernels_in(run, "gemm", phase=run.phase) if k.short_name.startswith("nvjet")]
    if not on_gpu(run) or not nvjet:
        return None
    facts = {"share": share_of(run, nvjet, run.phase)}
    return note("nvjet_gemms", "reference", "cuBLAS picked its nvjet GEMMs, not the A100's",
                "nvjet is cuBLAS's GEMM family for Hopper and newer ({sm} in the names {on}), launched with "
                "cuLaunchKernelEx: same matmuls as on the A100, other kernel names, {share}."
                + _unlike_blog(run),
                weight=0.02, facts=facts, names={"sm": sm_in_name(nvjet[0]) or "its architecture",
                                                 "on": text.on_device(run.environment)}, kernels=nvjet,
                evidence=[text.kernel_line(k) for k in nvjet])


def ranking_vs_blog(run: Run, peers: Peers) -> Note | None:
    """On the A100 flash beat cuDNN; where this GPU's order differs, say what the kernels' names show."""
    fused = {k: p for k, p in {**peers, run.variant: run}.items() if _blog_fused(k) and rankable(p) and p.gpu_ms}
    if not on_gpu(run) or run.variant not in fused or len(fused) < 2 or not BLOG.matches(run.workload):
        return None
    here = sorted(fused, key=lambda k: fused[k].gpu_ms)
    there = sorted(fused, key=lambda k: BLOG.results[k].gpu_us)
    if here.index(run.variant) == there.index(run.variant) or here[0] != run.variant:
        return None  # said once, about the run that moved up
    main = {k: main_kernel(p) for k, p in fused.items()}
    if hopper_design(main[here[0]]) and ampere_design(main[there[0]]):
        reason = (f"{label(fused[here[0]])}'s kernel is written for {run.environment.sm} (its name says so); "
                  f"{label(fused[there[0]])}'s, {text.kernel(main[there[0]], 32)}, is an Ampere-design kernel.")
    else:
        reason = "The kernels' names do not show why; the cause is not known from these traces."
    return note("ranking_vs_blog", "reference",
                f"{label(run)} ranks #{here.index(run.variant) + 1} of {len(here)} {text.on_device(run.environment)},"
                f" #{there.index(run.variant) + 1} on the blog's A100",
                "On the A100 FlashAttention-2 won. " + reason,
                weight=0.15,
                evidence=[f"{text.machine(run.environment)}, fastest first: "
                          + " < ".join(f"{k} {text.ms(fused[k].gpu_ms)}" for k in here),
                          "A100, fastest first: " + " < ".join(f"{k} {text.us(BLOG.results[k].gpu_us)}" for k in there)]
                + [text.kernel_line(main[k]) for k in here])
