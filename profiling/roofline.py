"""Where a run stands against its GPU's limits: its roofline point and the roofs it is drawn under. Reads the run;
never measures, never imports torch.

A point: x, the arithmetic intensity, is the pass's FLOPs (`Workload.pass_flops`, the one FLOP model the TFLOP/s
figure is of: `Run.tflops`) over the least bytes the pass must move (`Workload.moved_bytes` as the run's variant lays
its tensors out: `explain.facts.moved`, the one bytes model); y is those FLOPs over the timing's median, in TFLOP/s.
So y / x is the bytes the pass must move over its time: a point above the memory roof moved them faster than a copy
streams through HBM, which a warm loop does when part of its bytes stay in the L2 from the call before.

The roofs: memory at the device-to-device copy rate the run's process measured (`Environment.copy_bytes_per_s`), else
the datasheet's HBM figure; compute at a matmul rate the process measured in the run's dtype
(`Environment.matmul_flops_per_s`: an 8192³ product, timed once per process beside the copy, timing.matmul_rate; fp32's
named with its TF32 setting), else the datasheet's peak. A measured roof has the datasheet's figure drawn thin beside
it, named as the datasheet's. Recordings made before the matmul was measured have the datasheet's compute roof alone.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Iterable

from . import text
from .environment import HBM_BYTES_PER_US, Environment, hbm_key
from .explain.facts import packing, sparse
from .results import Comparison, Run, Sweep, Timing


@dataclass(frozen=True)
class Point:
    """One timing of one run on the roofline."""
    variant: str
    flops: float        # the pass's FLOPs (Workload.pass_flops)
    bytes: int          # the least bytes the pass moves (Workload.moved_bytes, as the variant lays them out)
    ms: float           # the timing's median
    cold: bool          # timed with the L2 flushed before every call (else warm: back to back, or a graph's replays)
    working_set: int = 0  # the distinct bytes the pass touches (Workload.working_set_bytes): what the L2 may hold

    @property
    def intensity(self) -> float:
        """FLOPs per byte moved."""
        return self.flops / self.bytes

    @property
    def tflops(self) -> float:
        return self.flops / (self.ms * 1e-3) / 1e12

    @property
    def bytes_per_s(self) -> float:
        """The least bytes over the time: what the pass moved at the least, per second."""
        return self.bytes / (self.ms * 1e-3)


def _point(run: Run, timing: Timing | None, cold: bool) -> Point | None:
    if timing is None or not timing.median_ms:
        return None
    w = run.workload
    laid = (run.phase, packing(run), sparse(run))
    return Point(run.variant, w.pass_flops, w.moved_bytes(*laid), timing.median_ms, cold, w.working_set_bytes(*laid))


def points(run: Run) -> list[Point]:
    """The run's points: its timing's (warm, or cold under cold timing) and, under cold timing, the warm events taken
    beside it where they are of the run's own pass (a backward view's are its whole step's: not of its FLOPs)."""
    if not run.ok or run.timing is None:
        return []
    if run.workload.timing != "cold":
        return [p for p in (_point(run, run.timing, False),) if p]
    warm = _point(run, run.warm_timing, False) if run.phase == run.call else None
    return [p for p in (warm, _point(run, run.timing, True)) if p]


@dataclass(frozen=True)
class Roof:
    """A ceiling: bytes per second (memory) or FLOPs per second (compute), measured or the datasheet's."""
    kind: str           # "memory" (bytes per second) or "compute" (FLOPs per second)
    value: float
    measured: bool
    what: str           # what it is: "device-to-device copy", "bf16 matmul", "HBM", "bf16 peak"

    @property
    def figure(self) -> str:
        return text.bandwidth(self.value / 1e6) if self.kind == "memory" else f"{self.value / 1e12:.0f} TFLOP/s"

    @property
    def label(self) -> str:
        """'device-to-device copy 4.1 TB/s, measured', 'bf16 peak 989 TFLOP/s, datasheet'."""
        return f"{self.what} {self.figure}, {'measured' if self.measured else 'datasheet'}"


@dataclass(frozen=True)
class Roofs:
    memory: Roof | None     # what the memory-bound slope is set at
    compute: Roof | None    # what the compute-bound ceiling is set at
    beside: tuple[Roof, ...] = ()  # the datasheet's figures, drawn thin beside measured roofs


def roofs(env: Environment, dtype: str) -> Roofs:
    """The memory and compute roofs of `env` in `dtype`: measured where the process measured them, else the
    datasheet's (None where neither is known); the datasheet's beside a measured one."""
    hbm = hbm_key(env.device_name)
    hbm_sheet = Roof("memory", HBM_BYTES_PER_US[hbm] * 1e6, False, "HBM") if hbm and not env.mig else None
    peak = (env.peak_tflops or {}).get(dtype)
    peak_sheet = Roof("compute", peak * 1e12, False, f"{dtype} peak") if peak else None
    copy = Roof("memory", env.copy_bytes_per_s, True, "copy") if env.copy_bytes_per_s else None
    rate = (env.matmul_flops_per_s or {}).get(dtype)
    tf32 = {True: " (TF32 allowed)", False: " (TF32 off)"}.get(env.matmul_tf32, "") if dtype == "fp32" else ""
    matmul = Roof("compute", rate, True, f"{dtype} matmul{tf32}") if rate else None
    return Roofs(copy or hbm_sheet, matmul or peak_sheet,
                 tuple(r for r, m in ((hbm_sheet, copy), (peak_sheet, matmul)) if r and m))


def _middle(values: set) -> float | None:
    """The median of measured figures (one of them, not a mean), or None where none was measured."""
    values = sorted(v for v in values if v)
    return values[len(values) // 2] if values else None


def _matmul_rate(runs: list[Run], dtype: str) -> float | None:
    """The matmul rate in `dtype` the runs' processes measured (the median of those measured), or None."""
    return _middle({(r.environment.matmul_flops_per_s or {}).get(dtype) for r in runs})


def roofs_of(runs: Iterable[Run]) -> Roofs:
    """The roofs of `runs` (one GPU): a sweep's runs came from several processes, each measured its own copy (or
    none): the median of those measured. The compute roof is in the first run's dtype; where another run is in
    another (an fp8 twin beside its base), that dtype's measured matmul is drawn thin beside it."""
    runs = list(runs)
    dtype, *others = dict.fromkeys(r.workload.dtype for r in runs)
    rate = _matmul_rate(runs, dtype)
    merged = replace(runs[0].environment, copy_bytes_per_s=_middle({r.environment.copy_bytes_per_s for r in runs}),
                     matmul_flops_per_s={dtype: rate} if rate else None)
    found = roofs(merged, dtype)
    beside = tuple(Roof("compute", rate, True, f"{other} matmul") for other in others
                   if (rate := _matmul_rate(runs, other)))
    return replace(found, beside=found.beside + beside)


def runs(result: Comparison | Sweep) -> list[Run]:
    """The runs a comparison's or a sweep's roofline draws."""
    return list(result.runs) if isinstance(result, Sweep) else [result.a, result.b]


def refusal(runs: Iterable[Run]) -> str | None:
    """Why `runs` have no roofline, in one line (None: they have one)."""
    runs = list(runs)
    if not runs:
        return "No roofline: no runs."
    env = runs[0].environment
    if env.device != "cuda":
        return ("No roofline: a CPU run has no GPU roofs to set it against (no copy or matmul rate measured on a GPU, "
                "no datasheet figure); measure on a GPU or choose a recording.")
    if runs[0].workload.gpus > 1:
        return f"No roofline: the run spans {runs[0].workload.gpus} GPUs and the roofs are one GPU's."
    if not any(points(r) for r in runs):
        return "No roofline: no run was timed."
    r = roofs_of(runs)
    if r.memory is None and r.compute is None:
        return (f"No roofline: neither a measured copy rate nor a datasheet figure is known for "
                f"{env.device_name}.")
    return None


def above_memory_roof(pts: Iterable[Point], r: Roofs) -> list[Point]:
    """The points that moved their least bytes faster than the memory roof."""
    return [p for p in pts if r.memory is not None and p.bytes_per_s > r.memory.value]


def caption(runs: Iterable[Run]) -> str:
    """What the roofline shows and what was measured, one paragraph; the L2's part said only where a point shows it."""
    runs = list(runs)
    r = roofs_of(runs)
    def where(figures: set) -> str:
        return "the run’s process" if len(figures) == 1 else \
            f"each of the {len(figures)} processes the runs came from (the median)"
    copies = {run.environment.copy_bytes_per_s for run in runs if run.environment.copy_bytes_per_s}
    rates = {(run.environment.matmul_flops_per_s or {}).get(runs[0].workload.dtype) for run in runs} - {None}
    pts = [p for run in runs for p in points(run)]
    said = ["x: the pass's FLOPs over the least bytes it must move (each input and output once); y: those FLOPs over "
            "the median GPU time."]
    if r.memory is not None:
        said.append(f"Memory roof: {'a device-to-device copy measured in ' + where(copies) if r.memory.measured else 'the datasheet’s HBM figure (no copy rate was measured)'}, "
                    f"{text.bandwidth(r.memory.value / 1e6)}.")
    if r.compute is not None:
        what = (f"a large {r.compute.what} measured on this GPU in {where(rates)}" if r.compute.measured else
                "the datasheet’s dense peak (no matmul rate was measured)")
        thin = "; the datasheet’s peak drawn thin beside it" if any(b.kind == "compute" and not b.measured
                                                                     for b in r.beside) else ""
        said.append(f"Compute roof: {what}, {r.compute.value / 1e12:.0f} TFLOP/s in {runs[0].workload.dtype}{thin}.")
        for b in (b for b in r.beside if b.kind == "compute" and b.measured):  # another side's dtype
            said.append(f"Thin beside it, the {b.what} measured the same way for the runs in {b.what.split()[0]}: "
                        f"{b.figure}.")
    if any(p.cold for p in pts):
        said.append("Filled: warm (back to back); hollow: cold (the L2 flushed before every call).")
    above = above_memory_roof(pts, r)
    l2 = runs[0].environment.l2_cache_bytes
    resident = [p for p in above if not p.cold and l2 and p.working_set <= l2]
    beyond = [p for p in above if p not in resident]
    if resident:
        said.append(f"Above the memory roof, warm ({', '.join(dict.fromkeys(p.variant for p in resident))}): its "
                    f"working set fits the {text.size(l2)} L2, where the loop found part of its bytes from the call "
                    "before; they did not all come from HBM.")
    if beyond:
        names = ", ".join(dict.fromkeys(f"{p.variant} ({'cold' if p.cold else 'warm'})" for p in beyond))
        fits = f", with a working set beyond the {text.size(l2)} L2" if l2 else ""
        said.append(f"Above the memory roof{fits} ({names}): the pass moved its least bytes faster than the memory "
                    "roof's figure.")
    return " ".join(said)
