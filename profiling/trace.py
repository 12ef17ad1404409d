"""Chrome trace -> per-forward tables.

The live path and the recorded fixtures go through the same function: a Chrome trace
(as `torch.profiler` exports it) in, kernels and host ops per call out. Kernels are
attributed to a call by their launch: the runtime call (`cudaLaunchKernel`,
`cuLaunchKernelEx`, ...) that shares the kernel's correlation id must sit inside that
call's `record_function` range on the CPU (in time, on any thread of the process: a
backward's launches come from the autograd engine's own thread), and the aten ops around
that launch call on its thread are the ones that launched it (`Kernel.launched_by`). A
kernel or op under the engine's `autograd::engine::evaluate_function: <Node>` is the
backward's; the rest are the forward's.
"""
from __future__ import annotations

import gzip
import re
import statistics
import functools
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from . import scores
from .dispatch import SDPA_BACKEND_OPS
from .results import HostOp, Kernel, Launch, loads, share_by_phase

CALL_RANGE = "attention_profiler::call"  # record_function name of each profiled call (a forward, or a training step)
RANGES = (CALL_RANGE, "attention_profiler::forward")  # the second: recordings made before training steps
BACKWARD_MARK = "autograd::engine::evaluate_function:"
GPU_CATEGORIES = {"kernel", "gpu_memcpy", "gpu_memset"}
LAUNCH_CATEGORIES = {"cuda_runtime", "cuda_driver"}

@dataclass
class TraceSummary:
    forwards: int
    kernels: list[Kernel]
    host_ops: list[HostOp]
    profiled_host_ms: float | None           # the profiled calls' ranges: the median (set beside a timed call)
    backend: str | None
    cpu_peak_extra_bytes: int | None = None  # from profile_memory events, when recorded
    profiled_host_mean_ms: float | None = None  # ... and their mean: what the host ops' per-call means are shares of

    @property
    def launches(self) -> float:
        """Kernels per profiled call, every phase's."""
        return sum(k.calls_per_forward for k in self.kernels)


def load_trace(path: str | Path) -> dict:
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as f:
        return loads(f.read())


# -- names, categories, precision -------------------------------------------------------
_GENERIC_KERNELS = ("elementwise_kernel", "vectorized_elementwise_kernel", "unrolled_elementwise_kernel",
                    "reduce_kernel", "index_elementwise_kernel")
_WRAPPER_KERNELS = ("cutlass::device_kernel",)  # FlashAttention-3's kernels: cutlass::device_kernel<flash::...>
_WRAPPER_FUNCTORS = {"AUnary", "BUnary", "Binary", "Unary", "CUDA"}


def _operation(template_args: str) -> str | None:
    """The op a generic ATen kernel runs: `masked_fill_kernel(`, `where_kernel_impl(`, `MulFunctor`."""
    named = re.search(r"([A-Za-z0-9]+(?:_[A-Za-z0-9]+)*?)_kernel(?:_impl|_cuda)?\(", template_args)
    if named:
        return named.group(1).lower()
    for prefix, suffix in re.findall(r"(\w+?)Functor(?:_(\w+))?", template_args):
        if suffix:
            return suffix.lower()          # CUDAFunctor_add -> add
        if prefix not in _WRAPPER_FUNCTORS:
            return prefix.lower()          # MulFunctor -> mul, FillFunctor -> fill
    return None


def short_name(name: str) -> str:
    """A readable name: template arguments and namespaces dropped, the op kept for generic kernels."""
    if name.startswith(("Memcpy", "Memset")):
        return name.split(" (")[0]
    base = re.sub(r"^void\s+", "", name).replace("(anonymous namespace)::", "")
    base = re.split(r"[<(]", base, maxsplit=1)[0].replace("at::native::", "")
    if base in _WRAPPER_KERNELS:  # a library's kernel wrapped in CUTLASS's launcher: its first template argument
        inner = re.findall(r"<\s*([A-Za-z_][\w:]*)", name)
        named = next((n for n in inner if not re.search(r"enable_sm\d+", n)), None)
        if named:
            base = f"{base} [{named}]"
    elif base in _GENERIC_KERNELS:
        operation = _operation(name[name.find(base) + len(base):])
        if operation:
            base = f"{base} [{operation}]"
    return base if len(base) <= 100 else base[:97] + "..."


@functools.cache
def _variants_patterns() -> dict[str, str]:
    """Every variant's `kernel_patterns`, together (attention_variants: read without torch)."""
    from attention_variants import VARIANTS

    return {piece: kind for v in VARIANTS.values() for piece, kind in v.kernel_patterns.items()}


def category(name: str, trace_category: str = "kernel") -> str:
    if trace_category == "gpu_memcpy" or name.startswith("Memcpy"):
        return "memcpy"
    if trace_category == "gpu_memset" or name.startswith("Memset"):
        return "memset"
    lower = name.lower()
    if "triton" in lower:
        return "triton"
    if "compiledfxgraph" in lower or "compiled region" in lower:
        return "compiled graph"
    if "attention_math" in lower or lower.endswith("scaled_dot_product_attention"):
        return "other"  # SDPA's entry and its math path only call other ops
    for piece, kind in _variants_patterns().items():  # what a variant's own file says of its kernels' names
        if piece in lower:
            return kind
    if name in scores.elementwise_ops():  # a CPU's op of a score transform (aten::tanh): elementwise, as it declares
        return "elementwise"
    if any(s in lower for s in ("flash_fwd", "flash_bwd", "flash_attention", "fmha", "sdpa", "attention",
                                "dot_do_o", "convert_dq")):  # the backward's pre- and post-passes belong to it
        return "fused attention"
    if any(s in lower for s in ("gemm", "nvjet", "xmma", "cutlass", "gemv", "cublas", "matmul", "bmm", "mm")) \
            and "elementwise" not in lower:
        return "gemm"
    if "softmax" in lower:
        return "softmax"
    if "reduce" in lower or "sum" in lower or "max" in lower:
        return "reduction"
    if any(s in lower for s in ("copy", "catarray", "transpose", "clone", "contiguous")):
        return "copy"
    if any(s in lower for s in ("elementwise", "functor", "fill", "where", "mul", "add", "div", "triu", "tril")):
        return "elementwise"
    return "other"


def precision(name: str) -> str | None:
    """The instruction family the kernel's name tells (FFMA on CUDA cores, TF32, tensor-core MMA); None when it
    tells none. Not the data type: a name's `f16` or `bf16` is a template choice, not the inputs' dtype."""
    lower = name.lower()
    if "ffma" in lower or "sgemm" in lower or ("f32f32" in lower and "gemm" in lower):
        return "FP32 on CUDA cores (ffma)"
    if "tf32" in lower:
        return "TF32 on tensor cores"
    for mark in ("wgmma", "hmma", "s16816", "s1688", "gmma"):
        if mark in lower:
            return f"tensor cores ({mark})"
    if lower.startswith("nvjet"):
        return "tensor cores (cuBLAS nvjet)"
    return None


# -- the parser ---------------------------------------------------------------------------
def call_ranges(events: list[dict]) -> list[dict]:
    ranges = [e for e in events if e.get("ph") == "X" and e.get("cat") == "user_annotation"
              and e.get("name", "").startswith(RANGES)]
    return sorted(ranges, key=lambda e: e["ts"])


def _inside(event: dict, rng: dict) -> bool:
    return rng["ts"] <= event["ts"] <= rng["ts"] + rng["dur"] and event.get("pid") == rng.get("pid")


def _nesting(ops: list[dict]) -> tuple[dict[int, float], dict[int, str], dict[int, tuple[str, ...]]]:
    """Self time of each op (its duration less its direct children's), by nesting on one thread, its phase:
    "backward" inside the autograd engine's evaluate_function, else "forward"; and its chain, the ops around it
    and itself, outermost first."""
    self_us: dict[int, float] = {}
    phase: dict[int, str] = {}
    chain: dict[int, tuple[str, ...]] = {}
    by_thread = defaultdict(list)
    for op in ops:
        by_thread[op.get("tid")].append(op)
    for thread_ops in by_thread.values():
        thread_ops.sort(key=lambda e: (e["ts"], -e["dur"]))
        stack: list[dict] = []
        for op in thread_ops:
            while stack and op["ts"] >= stack[-1]["ts"] + stack[-1]["dur"]:
                stack.pop()
            self_us[id(op)] = float(op["dur"])
            if stack:
                self_us[id(stack[-1])] -= float(op["dur"])
            backward = op["name"].startswith(BACKWARD_MARK) or (stack and phase[id(stack[-1])] == "backward")
            phase[id(op)] = "backward" if backward else "forward"
            chain[id(op)] = (chain[id(stack[-1])] if stack else ()) + (op["name"],)
            stack.append(op)
    return self_us, phase, chain


def _cpu_peak_extra(events: list[dict], ranges: list[dict]) -> int | None:
    memory = sorted((e for e in events if e.get("name") == "[memory]" and "Total Allocated" in e.get("args", {})
                     and e["args"].get("Device Type", 0) == 0), key=lambda e: e["ts"])
    peaks = []
    for rng in ranges:
        inside = [e for e in memory if rng["ts"] <= e["ts"] <= rng["ts"] + rng["dur"]]
        if inside:
            first = inside[0]["args"]
            base = first["Total Allocated"] - first.get("Bytes", 0)
            peaks.append(max(e["args"]["Total Allocated"] for e in inside) - base)
    return max(peaks) if peaks else None


def summarize_trace(trace: dict) -> TraceSummary:
    """Per-call kernel table and host ops from one profiled window of K calls, each row of the forward or the
    backward."""
    events = [e for e in trace.get("traceEvents", []) if isinstance(e, dict)]
    ranges = call_ranges(events)
    forwards = len(ranges)
    if not forwards:
        raise ValueError(f"no '{CALL_RANGE}' ranges in this trace: nothing to attribute kernels to")

    # CPU ops inside the ranges, on any thread of the process (the backward runs on the autograd engine's)
    cpu_ops = [e for e in events if e.get("ph") == "X" and e.get("cat") == "cpu_op"
               and any(_inside(e, r) for r in ranges)]
    self_us, phase, chain = _nesting(cpu_ops)
    ops = defaultdict(lambda: [0, 0.0, 0.0])
    for op in cpu_ops:
        row = ops[op["name"], phase[id(op)]]
        row[0] += 1
        row[1] += float(op["dur"])
        row[2] += self_us[id(op)]
    host_ops = [HostOp(name, calls / forwards, total / forwards, self_ / forwards, phase=step)
                for (name, step), (calls, total, self_) in ops.items()]
    host_ops.sort(key=lambda h: -h.total_us_per_forward)
    backend = next((SDPA_BACKEND_OPS[op.name] for op in host_ops if op.name in SDPA_BACKEND_OPS), None)
    host_ms = statistics.median(r["dur"] for r in ranges) / 1000.0  # one slow call must not skew it
    host_mean_ms = sum(r["dur"] for r in ranges) / forwards / 1000.0  # the ops' times are means over the same calls

    # GPU work launched from inside the ranges
    launches = {e["args"]["correlation"]: e for e in events
                if e.get("cat") in LAUNCH_CATEGORIES and "correlation" in e.get("args", {})
                and any(_inside(e, r) for r in ranges)}
    gpu = [e for e in events if e.get("ph") == "X" and e.get("cat") in GPU_CATEGORIES
           and e.get("args", {}).get("correlation") in launches]
    gpu.sort(key=lambda e: e["ts"])
    if gpu:
        kernels = _gpu_kernels(gpu, launches, _launching_ops(launches.values(), cpu_ops), forwards)
    else:  # CPU run: the table lists the ops that did the work, by self time
        kernels = _cpu_kernels(host_ops, [(op, chain[id(op)], self_us[id(op)]) for op in cpu_ops], forwards)
    return TraceSummary(forwards, kernels, host_ops, host_ms, backend, _cpu_peak_extra(events, ranges), host_mean_ms)


def _launching_ops(launches, cpu_ops: list[dict]) -> dict[int, tuple[str, ...]]:
    """Correlation id -> the aten ops around its launch call on the same thread, outermost first."""
    by_thread = defaultdict(list)
    for op in cpu_ops:
        by_thread[(op.get("pid"), op.get("tid"))].append(op)
    chains = {}
    for launch in launches:
        around = [op for op in by_thread[(launch.get("pid"), launch.get("tid"))]
                  if op["ts"] <= launch["ts"] <= op["ts"] + op["dur"]]
        around.sort(key=lambda op: (op["ts"], -op["dur"]))
        chains[launch["args"]["correlation"]] = tuple(op["name"] for op in around)
    return chains


def _gpu_kernels(gpu: list[dict], launches: dict, chains: dict[int, tuple[str, ...]], forwards: int) -> list[Kernel]:
    rows: dict[tuple[str, str], Kernel] = {}
    for e in gpu:
        args = e.get("args", {})
        chain = list(chains[args["correlation"]])
        phase = "backward" if any(op.startswith(BACKWARD_MARK) for op in chain) else "forward"
        row = rows.get((e["name"], phase))
        if row is None:
            row = rows[e["name"], phase] = Kernel(
                name=e["name"], short_name=short_name(e["name"]), category=category(e["name"], e["cat"]),
                calls_per_forward=0.0, us_per_forward=0.0, share=0.0,
                grid=args.get("grid"), block=args.get("block"),
                registers_per_thread=args.get("registers per thread"),
                shared_memory_bytes=args.get("shared memory"),
                occupancy_pct=args.get("est. achieved occupancy %"),
                launch_api=launches[args["correlation"]]["name"], precision=precision(e["name"]), launched_by=[],
                phase=phase)
        row.calls_per_forward += 1.0 / forwards
        row.us_per_forward += float(e.get("dur", 0.0)) / forwards
        launch = next((x for x in row.launched_by if x.ops == chain), None)
        if launch is None:
            launch = Launch(ops=chain, calls_per_forward=0.0, us_per_forward=0.0)
            row.launched_by.append(launch)
        launch.calls_per_forward += 1.0 / forwards
        launch.us_per_forward += float(e.get("dur", 0.0)) / forwards
    return share_by_phase(list(rows.values()))  # in order of first launch


def _cpu_kernels(host_ops: list[HostOp], calls: list[tuple[dict, tuple[str, ...], float]],
                 forwards: int) -> list[Kernel]:
    """The ops that did the work (over 0.5 µs of self time per call), by self time; each with the chains it ran in
    (`launched_by`, as a GPU kernel's launches: a copy_ under repeat_interleave is K's or V's copy, one under
    masked_fill → clone the scores')."""
    working = [h for h in host_ops if h.self_us_per_forward > 0.5]
    rows = [Kernel(name=h.name, short_name=h.name.replace("aten::", ""), category=category(h.name, "cpu_op"),
                   calls_per_forward=h.calls_per_forward, us_per_forward=h.self_us_per_forward, share=0.0,
                   launched_by=[], phase=h.phase) for h in working]
    by = {(k.name, k.phase): k for k in rows}
    for op, ops, self_ in calls:
        row = by.get((op["name"], "backward" if any(o.startswith(BACKWARD_MARK) for o in ops) else "forward"))
        if row is None:
            continue
        launch = next((x for x in row.launched_by if tuple(x.ops) == ops), None)
        if launch is None:
            launch = Launch(ops=list(ops), calls_per_forward=0.0, us_per_forward=0.0)
            row.launched_by.append(launch)
        launch.calls_per_forward += 1.0 / forwards
        launch.us_per_forward += self_ / forwards
    return share_by_phase(sorted(rows, key=lambda k: -k.us_per_forward))
