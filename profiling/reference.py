"""The published reference: the blog's A100 measurements, as data, so every run can be set against them.

Source: the Hugging Face blog post "Profiling in PyTorch (Part 3): Attention is all you profile"
(July 2026), measured on one A100-SXM4-80GB. Only what the post states is here; where it gives no
number the field is None, and nothing is filled in from elsewhere.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .workload import FIELDS, Workload


@dataclass(frozen=True)
class ReferenceResult:
    """What the blog saw for one variant, per forward."""
    kernels_per_forward: int | None
    kernels: tuple[str, ...]               # as the post names them; plain words where it gives no name
    gpu_us: float | None                   # GPU time per forward
    finding: str = ""                      # the post's lesson for this variant, in one line


@dataclass(frozen=True)
class Comparison:
    """Two variants the post set side by side, and its sentence on them ({here}: the ratio on the GPU at hand)."""
    variant: str                           # the one the sentence is about
    than: str                              # the one it is set against
    words: str


@dataclass(frozen=True)
class Reference:
    title: str
    device_name: str
    compute_capability: tuple[int, int]
    workload: Workload
    method: str                            # how it measured: warm-up, profiler schedule, what was counted
    results: dict[str, ReferenceResult] = field(default_factory=dict)
    compared: tuple[Comparison, ...] = ()  # the pairs the post set side by side
    def differences(self, workload: Workload) -> list[str]:
        """How `workload` differs from the blog's, field by field ("seq_len 4096 vs 1024"); [] when it matches.
        Every field of the request counts (a new one too); the seed and the device do not: the blog's inputs are
        random too, and it ran on a GPU."""
        said = []
        for f in FIELDS:
            spec, here, there = f.metadata["spec"], getattr(workload, f.name), getattr(self.workload, f.name)
            if here != there:
                spelled = [spec.spell(v) or "empty" for v in (here, there)]
                said.append(f"{f.name} " + " vs ".join(v if len(v) <= 24 else v[:20] + "…" for v in spelled))
        return said

    def matches(self, workload: Workload) -> bool:
        return workload.device == "cuda" and not self.differences(workload)


BLOG = Reference(
    title='Hugging Face blog, "Profiling in PyTorch (Part 3): Attention is all you profile" (July 2026)',
    device_name="NVIDIA A100-SXM4-80GB",
    compute_capability=(8, 0),
    workload=Workload.blog(),  # B=8, H=16, S=1024, D=64, bf16, causal, rank 4; mask triu(ones(S, S), 1) built once
    method=("3 warm-up calls; torch.profiler schedule wait 1 / warmup 1 / active 3; "
            "kernels counted inside one forward's record_function range"),
    results={
        "naive": ReferenceResult(
            kernels_per_forward=6,
            kernels=("GEMM q·kᵀ", "mul", "Memcpy DtoD", "masked_fill", "softmax", "GEMM p·v"),
            gpu_us=None,
            finding="out-of-place masked_fill hides a Memcpy: 6 kernels where 5 ops were written"),
        "naive_inplace": ReferenceResult(
            kernels_per_forward=5,
            kernels=("GEMM q·kᵀ", "mul", "masked_fill_", "softmax", "GEMM p·v"),
            gpu_us=1955.0,
            finding="masked_fill_ under no_grad: the Memcpy is gone, 5 kernels"),
        "sdpa_math": ReferenceResult(
            kernels_per_forward=20,
            kernels=("FP32 sgemm (CUDA cores) ×2", "fp32 upcast copies", "causal mask rebuilt every call",
                     "_safe_softmax", "bf16 downcast"),
            gpu_us=7239.0,
            finding="20 kernels, FP32 sgemm on CUDA cores, mask rebuilt every call: 3.7× slower than in-place naive"),
        "sdpa_efficient": ReferenceResult(
            kernels_per_forward=1,
            kernels=("fmha_cutlassF_bf16_aligned_64x64_rf_sm80",),
            gpu_us=277.9,
            finding="one CUTLASS kernel, the lightest on the CPU (a profiled range)"),
        "sdpa_flash": ReferenceResult(
            kernels_per_forward=1,
            kernels=("pytorch_flash::flash_fwd_kernel",),
            gpu_us=146.8,
            finding="FlashAttention-2, the fastest on the A100, at ~13% estimated occupancy by design"),
        "sdpa_cudnn": ReferenceResult(
            kernels_per_forward=1,
            kernels=("one cuDNN-generated fused kernel",),
            gpu_us=186.3,
            finding=("no transposes, yet the highest CPU time of the three (a profiled range); 0% occupancy, put "
                     "down to a CUPTI gap for cuLaunchKernelEx")),
    },
    compared=(Comparison("sdpa_math", "naive_inplace", "Math is {here} slower than in-place naive"),),
)
