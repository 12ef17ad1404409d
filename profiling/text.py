"""Numbers into words, in one place: for notes, cards, tables and the command line.

One spelling per unit (µs, ms, s; B, KiB, MiB, GiB), one truncation rule (`clip`), ratios written
"2.1×" for the sentence to give their direction ("2.1× faster on the H200 than on the A100"), one name for the
machine a run ran on (`on_device`: a replay shows another machine's run, so never "here"), readable kernel names
for tables (`kernel_labels`), and the glossary of the jargon notes use.
Nothing here measures or decides; it only writes.
"""
from __future__ import annotations

import functools
import re
from typing import TYPE_CHECKING, Mapping

from .workload import QUANTISED

if TYPE_CHECKING:
    from .results import HostOp, Kernel, Quantity

NAME_WIDTH = 48   # characters of a kernel name in a sentence; the table keeps the full name
LABEL_WIDTH = 28  # characters of a kernel name in the five-column table; "every column" keeps the full name


# -- numbers ----------------------------------------------------------------------------------
def ms(value: float) -> str:
    """0.060 ms, 20.108 ms, 1,234 ms."""
    return f"{value:,.0f} ms" if value >= 1000 else f"{value:.3f} ms"


def us(value: float) -> str:
    """57.3 µs; from a thousand µs on, in ms."""
    return ms(value / 1000) if value >= 1000 else f"{value:.1f} µs"


def seconds(value: float) -> str:
    """A wall time in seconds: 139 ms, 3.3 s, 61 s."""
    if value < 1:
        return f"{value * 1000:.0f} ms"
    return f"{value:.1f} s" if value < 10 else f"{value:,.0f} s"


def size(n_bytes: float) -> str:
    """512 B, 48.0 KiB, 256.0 MiB, 8.0 GiB (binary units, one spelling)."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n_bytes >= scale:
            return f"{n_bytes / scale:,.1f} {unit}"
    return f"{n_bytes:g} B"


def share(fraction: float) -> str:
    """0.387 -> 39%; small shares keep a decimal where it says something (1.5%, 3%)."""
    if fraction >= 0.095 or fraction == 0:
        return f"{100 * fraction:.0f}%"
    return f"{100 * fraction:.1f}".removesuffix(".0") + "%"


def percent(value: float) -> str:
    """A figure already in percent: 12.5%, 5.9%, 1,160% (never in powers of ten)."""
    if value >= 999.5:  # three figures would round to 1e+03
        return f"{value:,.0f}%"
    return f"{value:.3g}%" if value >= 10 else f"{value:.2g}%"


def times(ratio: float) -> str:
    """1.04×, 2.1×, 12×: two decimals under 1.1, so a ratio the verdict ranks never reads "1.0×"."""
    if ratio >= 10:
        return f"{ratio:.0f}×"
    return f"{ratio:.1f}×" if ratio >= 1.095 else f"{ratio:.2f}×"


def error(value: float) -> str:
    """An absolute error: 3.9e-03."""
    return f"{value:.1e}"


def rate(tflops: float, peak_share: float | None = None) -> str:
    """Arithmetic throughput: '512 TFLOP/s, 52% of the datasheet peak'; under one TFLOP/s in GFLOP/s."""
    said = f"{tflops:.3g} TFLOP/s" if tflops >= 1 else f"{tflops * 1000:.3g} GFLOP/s"
    return said + (f", {share(peak_share)} of the datasheet peak" if peak_share else "")


def p_value(p: float) -> str:
    """A test's p: 0.0079, 3.2e-05."""
    return f"{p:.2g}"


def count(value: float) -> str:
    """7, 4,096, 2.33: per-forward averages of whole counts print whole."""
    return f"{round(value):,}" if abs(value - round(value)) < 0.01 else f"{value:,.2f}"


def power(exponent: float, symbol: str = "S") -> str:
    """How a quantity grows with a sweep's axis: S^2.02, S^1, B^0.98."""
    return f"{symbol}^{exponent:.2f}".removesuffix(".00")


def axis_symbol(axis: str) -> str:
    """The letter a sweep's axis is said with, as its field's spec says it ("S={}" -> "S", "B={}" -> "B")."""
    from .workload import spec_of
    return spec_of(axis).said(0).split("=")[0]


def point(axis: str, value: float) -> str:
    """A point of a sweep's axis: 'S=1,024', 'B=64'."""
    return f"{axis_symbol(axis)}={round(value):,}"


def power_unit(axis: str) -> str:
    """The unit of an exponent of growth along `axis` ("power": with S; "power_B": with B)."""
    symbol = axis_symbol(axis)
    return "power" if symbol == "S" else f"power_{symbol}"


def bandwidth(bytes_per_us: float) -> str:
    """Memory traffic, from bytes per µs, decimal as datasheets give it: '4.2 TB/s', '860 GB/s'."""
    per_s = bytes_per_us * 1e6
    return f"{per_s / 1e12:.1f} TB/s" if per_s >= 1e12 else f"{per_s / 1e9:.0f} GB/s"


def mhz(value: float) -> str:
    """A clock: 1,980 MHz."""
    return f"{value:,.0f} MHz"


def joules(value: float) -> str:
    """An energy, three figures: 41.2 µJ, 3.87 mJ, 1.92 J, 1,922 J."""
    for unit, scale in (("J", 1.0), ("mJ", 1e-3), ("µJ", 1e-6)):
        if value >= 0.9995 * scale or unit == "µJ":  # 0.9999 J: '1.00 J', not '1e+03 mJ'
            figure = value / scale
            return f"{figure:,.0f} {unit}" if figure >= 999.5 else f"{figure:#.3g}".rstrip(".") + f" {unit}"


def watts(value: float) -> str:
    """A power: 681 W."""
    return f"{value:,.0f} W"


def energy(e, call: str = "call") -> str:
    """An `Energy` in a phrase: '3.87 mJ per forward at 612 W (2,583 calls back to back over 1.00 s)'."""
    return (f"{joules(e.joules_per_call)} per {call} at {watts(e.watts)} ({count(e.calls)} {e.loop} over "
            f"{e.seconds:.2f} s)")


FORMATS = {"ms": ms, "us": us, "s": seconds, "bytes": size, "share": share, "pct": percent, "x": times,
           "count": count, "power": power, "power_B": lambda e: power(e, "B"), "bytes_per_us": bandwidth,
           "error": error, "mhz": mhz, "J": joules, "W": watts}


def quantity(q: "Quantity") -> str:
    """A fact in its unit; a share with the total it is of: '39% of the forward'."""
    said = FORMATS[q.unit](q.value)
    return f"{said} of {q.of}" if q.unit == "share" and getattr(q, "of", None) else said


def machine(env) -> str:
    """The run's own device, short: "H200" for "NVIDIA H200", "H100" for "NVIDIA H100 80GB HBM3" (its memory and
    form factor left to the environment's line); "CPU" for any CPU."""
    if env.device != "cuda":
        return "CPU"
    name = re.sub(r"^(NVIDIA\s+)?(Tesla\s+)?", "", env.device_name)
    return re.sub(r"[\s-]+(\d+\s?GB|SXM\d*|PCIe|HBM\w*)\b.*$", "", name, flags=re.IGNORECASE) or "GPU"


def device_words(device: str) -> str:
    """'the GPU' or 'the CPU': a workload's device in a sentence."""
    return "the GPU" if device == "cuda" else "the CPU"


def call(workload) -> str:
    """What the workload's figure is of: 'forward', 'step' (forward + backward) or 'backward'."""
    return {"fwd": "forward", "fwd+bwd": "step", "bwd": "backward"}[workload.passes]


def host_call(workload) -> str:
    """What one call the host issues is: 'forward', or a training pass's whole 'step' (a backward view's too)."""
    return "step" if workload.passes != "fwd" else "forward"


def on_device(env) -> str:
    """Where a run ran, in words that stay true when it is replayed elsewhere: "on the H200", "on the CPU"."""
    return f"on the {machine(env)}"


def measured(live: bool, source: str, env, workload, axis: str | None = None, points=(), quantised=None) -> str:
    """What an answer is of, in one line that travels with it (the page, the present view, an embed, a PNG, the JSON,
    a link's preview): where it ran and whether it is replayed, then the problem with its pass always said:
    'Recorded on NVIDIA H200 · torch 2.11.0 (recording h200-torch2.11) · B=8, H=16, S=1024, D=64, bf16, causal,
    forward'. A sweep's (its `axis` and `points`) ends '… · S from 128 to 16,384 (8 points)'. A side that quantised
    the problem itself (`quantised`: "A", "B" -> its workload) is named after it: '… · A in fp8 (q, k and v in e4m3,
    quantised from the same drawn values)'."""
    where = f"{env.device_name} · torch {env.torch_version.split('+')[0]}"
    return (f"Measured live on {where}" if live else f"Recorded on {where} (recording {source})") + \
        f" · {problem(workload, axis, points)}" + quantised_sides(quantised or {})


def quantised_sides(quantised) -> str:
    """' · A in fp8 (q, k and v in e4m3, quantised from the same drawn values)' for each side ("A", "B" -> the
    workload it ran) that quantised the problem itself (an fp8 twin); '' for none."""
    return "".join(f" · {side} in fp8 ({QUANTISED[w.quantised]}, quantised from the same drawn values)"
                   for side, w in quantised.items())


def problem(workload, axis: str | None = None, points=()) -> str:
    """The problem an answer is of, its pass always said: 'B=8, H=16, S=1024, D=64, bf16, causal, forward'; a
    sweep's (its `axis`) without the axis' field, then its points: '… · S from 128 to 16,384 (8 points)', or, none
    chosen yet, '… · over S'."""
    said = workload.family(axis) if axis else workload.words()
    if workload.passes == "fwd":
        said += ", forward"
    if axis:
        said += (f" · {axis_symbol(axis)}={count(points[0])} (1 point)" if len(points) == 1 else
                 f" · {axis_symbol(axis)} from {count(points[0])} to {count(points[-1])} ({len(points)} points)"
                 if points else f" · over {axis_symbol(axis)}")
    return said


def machine_load(a, b) -> str:
    """How busy the machine was while A and B were timed live, and how much their samples varied, beside the
    verdict: 'load average 1.9 as the timing began, 2.4 as it ended, on 2 CPU threads · run-to-run spread: A 35%,
    B 12%'. Empty for a replay or where the OS reports no load."""
    if a.load_before is None or a.load_after is None:
        return ""
    threads = f", on {plural(a.environment.cpu_threads, 'CPU thread')}" if a.environment.cpu_threads else ""
    spread = [f"{side} {percent(r.timing.spread_pct)}" for side, r in (("A", a), ("B", b)) if r.timing]
    return (f"load average {a.load_before:.1f} as the timing began, {a.load_after:.1f} as it ended{threads}"
            + (f" · run-to-run spread: {', '.join(spread)}" if spread else ""))


def score_grid(text_: str, queries: int, keys: int) -> str:
    """The rules speak of the score matrix as S×S, queries by keys; with fewer queries than keys (a decode step) it
    is Lq×S, and `text_` says so."""
    return text_ if queries == keys else text_.replace("S×S", "Lq×S")


def tensor_sum(names) -> str:
    """The tensors a figure of bytes adds up: 'q + K + V + out'."""
    return " + ".join(names)


def tensor_list(names) -> str:
    """'q, K, V and out'."""
    names = list(names)
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def counters(c) -> str:
    """One call under Nsight Compute in one line (a `counters.Counters`): 'DRAM 48.0 MiB read, 9.6 MiB written · L2 hit
    41% · achieved occupancy 12% · tensor pipe 38% (1 kernel; percentages weighted by each kernel's time)', or ncu's
    refusal as it said it."""
    if c.refusal:
        return f"no counters: {c.refusal}"
    parts = []
    if c.dram_read_bytes is not None and c.dram_write_bytes is not None:
        parts.append(f"DRAM {size(c.dram_read_bytes)} read, {size(c.dram_write_bytes)} written")
    for words, value in (("L2 hit", c.l2_hit_pct), ("achieved occupancy", c.occupancy_pct),
                         ("tensor pipe", c.tensor_pct)):
        if value is not None:
            parts.append(f"{words} {percent(value)}")
    n = len(c.kernels)
    weighted = "; percentages weighted by each kernel's time" if n > 1 else ""
    return " · ".join(parts) + f" ({plural(n, 'kernel')}{weighted}; one call, caches flushed by ncu)"


def plural(n: float, word: str, many: str | None = None) -> str:
    return f"{count(n)} {word if n == 1 else many or word + 's'}"


def as_sentence(clause: str) -> str:
    """A reason written as a clause ('a block-diagonal mask: it reads ...') as a sentence of its own: its first word
    capitalised unless it is a name as code spells it (torch, varlen_attn, SDPA's), a full stop at its end."""
    first = clause.split(" ", 1)[0]
    plain = first.isalpha() and first.islower() and first != "torch" or re.fullmatch(r"[a-z]+(-[a-z]+)+", first)
    return (clause[:1].upper() + clause[1:] if plain else clause) + ("" if clause.endswith(".") else ".")


# -- names --------------------------------------------------------------------------------------
def sentence(words: str) -> str:
    """`words` begun with a capital, unless its first word is a name spelled in mixed case ("cuDNN frontend …" stays
    as cuDNN spells it)."""
    first = words.split(" ", 1)[0]
    return words if not words or any(c.isupper() for c in first[1:]) else words[0].upper() + words[1:]


def clip(text: str, width: int, keep_end: int = 0) -> str:
    """The one truncation rule: cut to `width` characters, the cut marked by an ellipsis; with `keep_end`, the
    last `keep_end` characters stay after it (an index or a layout that tells two names apart)."""
    if len(text) <= width:
        return text
    end = text[len(text) - keep_end:] if 0 < keep_end < width - 1 else ""
    return text[:max(width - 1 - len(end), 0)] + "…" + end


def kernel(k: "Kernel", width: int = NAME_WIDTH) -> str:
    """The kernel's short name where it fits, else its label (`kernel_label`: the tokens that tell it apart)."""
    name = k.short_name or k.name
    return name if len(name) <= width else kernel_label(name, width)


# Kernel names for a table: the trace's short name (trace.short_name) made to fit LABEL_WIDTH and tell rows
# apart. Generic ATen kernels name their op after their family; generated library names keep the tokens that
# differ between rows and that the notes talk about (generation, instruction, tile, layout); anything else loses
# noise (namespace, a long spelling, "_kernel") only until it fits, then is clipped keeping its last token.
_GENERIC = re.compile(r"(vectorized_elementwise|unrolled_elementwise|index_elementwise|elementwise|reduce)_kernel"
                      r"(?: \[(\w+)\])?$")
_FAMILY = {"vectorized_elementwise": "vectorized", "unrolled_elementwise": "unrolled",
           "index_elementwise": "index", "elementwise": "elementwise", "reduce": "reduce"}
_GENERATED = (  # (pattern matched at the name's start, label)
    (r"cudnn_generated_.*?sdpa_(sm\d+)_.*?_(wgmma|hmma|mma)_.*?(\d+x\d+x\d+)_", r"cudnn \1 \2 \3"),
    (r"(sm\d+)_xmma_gemm_.*?_([nt]{2})_[nt]_tilesize(\d+x\d+x\d+)_.*?_(ffma|hmma|imma|tf32)", r"\1 gemm \4 \2 \3"),
    (r"nvjet_(sm\d+)_[a-z]+_(\d+x\d+)_.*_([NT]{3})$", r"nvjet \1 \2 \3"),
    (r"fmha_cutlass[FB]_(\w+?)_aligned_(\d+x\d+)_rf_(sm\d+)", r"fmha \1 \2 \3"),
    (r"triton_([a-z]{3})_fused_+(\w+)", r"triton_\1 \2"),
    (r"kernel_cutlass_kernel_flash_attncuteflash_(fwd|bwd)_?([a-z0-9_]*?)(?:[A-Z]|_object|$)", r"fa4 \1 \2"),
)
_UNTIL_IT_FITS = (  # (pattern, replacement), one at a time while the name is too long
    (r"^\w+::", ""), (r"scaled_dot_product", "sdpa"), (r"_for_cpu$", "_cpu"), (r"_kernel$", ""),
    (r"_backward", " bwd"), (r"flex_attention", "flex"),
)
_ELEMENT_TYPE = re.compile(r"\b(?:c10::|cutlass::)?(BFloat16|bfloat16_t|Half|half_t|float|double|bool)\b")


@functools.lru_cache(maxsize=4096)  # a pure function of two values, asked again for every note and table row
def kernel_label(short_name: str, width: int = LABEL_WIDTH) -> str:
    """'vectorized_elementwise_kernel [mul]' -> 'vectorized · mul'; 'nvjet_sm90_tst_64x512_64x2_1x2_h_bz_coopB_NNT'
    -> 'nvjet sm90 64x512 NNT'; 'pytorch_flash::flash_fwd_kernel' -> 'flash_fwd_kernel'."""
    generic = _GENERIC.match(short_name)
    if generic:
        label = _FAMILY[generic.group(1)] + (f" · {generic.group(2)}" if generic.group(2) else "")
    else:
        label = next((m.expand(template) for pattern, template in _GENERATED
                      if (m := re.match(pattern, short_name))), short_name)
    for pattern, replacement in _UNTIL_IT_FITS:
        if len(label) <= width:
            break
        label = re.sub(pattern, replacement, label)
    last = re.search(r"[_ ][^_ ]{1,8}$", label)
    return clip(label, width, keep_end=len(last.group(0)) if last else 0)


def kernel_labels(short_names: list[str], full_names: list[str] | None = None, width: int = LABEL_WIDTH) -> list[str]:
    """A label per row, each unique among them. Where two labels collide, what tells the rows apart is added: the
    element type in their full names ('vectorized · fill<bool>', '… fill<float>'), else the first token where their
    short names differ ('nvjet sm90 128x128 TNT 2x1'), else a number ('#2', '#3')."""
    labels = [kernel_label(name, width) for name in short_names]
    for label in sorted({x for x in labels if labels.count(x) > 1}):
        rows = [i for i, x in enumerate(labels) if x == label]
        for suffixes in (_element_types([full_names[i] for i in rows]) if full_names else None,
                         _first_difference([short_names[i] for i in rows]),
                         [""] + [f" #{n}" for n in range(2, len(rows) + 1)]):
            if suffixes and len(set(suffixes)) == len(rows):
                break
        for i, suffix in zip(rows, suffixes):
            labels[i] = clip(label, width - len(suffix)) + suffix
    return labels


def _element_types(full_names: list[str]) -> list[str] | None:
    found = [_ELEMENT_TYPE.search(name) for name in full_names]
    return [f"<{m.group(1)}>" for m in found] if all(found) else None


def _first_difference(names: list[str]) -> list[str] | None:
    tokens = [re.split(r"[_\s]+", name) for name in names]
    for column in zip(*tokens):
        if len(set(column)) > 1:
            return [f" {token}" for token in column]
    return None


def op(name: str) -> str:
    """'aten::masked_fill_' -> 'masked_fill_'."""
    return name.removeprefix("aten::")


def host_op(name: str) -> str:
    """A host op as a sentence names it: inductor's '## Call CompiledFxGraph f4a…x ##' without its hash."""
    return re.sub(r"^## (Call CompiledFxGraph) \w+ ##$", r"\1", name)


def chain(ops: list[str]) -> str:
    """The ops around a launch, innermost last: 'masked_fill → clone → copy_'."""
    return " → ".join(op(o) for o in ops) or "no aten op"


def kernel_line(k: "Kernel") -> str:
    """'nvjet_sm90_tst_… · 84.4 µs per forward (8% of the forward) · 168 registers · 208.2 KiB shared ·
    cuLaunchKernelEx'; a kernel launched more than once a call, 'elementwise_kernel · ×2, 25.3 µs each · 50.5 µs per
    backward (17% of the backward)': every time names the pass it is of."""
    parts = [kernel(k, 64)]
    if round(k.calls_per_forward, 2) != 1:
        each = f", {us(k.us_per_forward / k.calls_per_forward)} each" if k.calls_per_forward else ""
        parts.append(f"×{count(k.calls_per_forward)}{each}")
    parts.append(f"{us(k.us_per_forward)} per {k.phase} ({share(k.share)} of the {k.phase})")
    if k.occupancy_pct is not None:
        parts.append(f"Kineto occupancy {percent(k.occupancy_pct)}")
    if k.registers_per_thread is not None:
        parts.append(f"{k.registers_per_thread} registers")
    if k.shared_memory_bytes:
        parts.append(f"{size(k.shared_memory_bytes)} shared")
    if k.launch_api:
        parts.append(k.launch_api)
    return " · ".join(parts)


def host_line(h: "HostOp") -> str:
    """'aten::clone · forward · 1 call · 51.7 µs (7.8 µs self) profiled': CPU time inside one profiled call."""
    return (f"{h.name} · {h.phase} · {plural(h.calls_per_forward, 'call')} · {us(h.total_us_per_forward)} "
            f"({us(h.self_us_per_forward)} self) profiled")


# -- sentences from facts ------------------------------------------------------------------------
class _Words(dict):
    """The values a template names, looked up as `str.format_map` asks for them: a fact in its unit, else a name."""

    def __init__(self, facts: Mapping[str, "Quantity"], names: Mapping[str, str]):
        super().__init__()
        self.facts, self.names = facts, names

    def __missing__(self, key: str) -> str:
        if key in self.facts:
            return quantity(self.facts[key])
        return self.names[key]


def fill(template: str, facts: Mapping[str, "Quantity"], names: Mapping[str, str] | None = None) -> str:
    """'{memcpy} takes {share}' with the facts written in their units and the names as given."""
    return template.format_map(_Words(facts, names or {}))


def word_count(text: str) -> int:
    return len(re.findall(r"[\w·×%.,:/→+-]+", text.replace("`", "")))


# -- the jargon notes use, glossed once -------------------------------------------------------------
GLOSSARY = {
    "wgmma": "Hopper's warp-group matrix-multiply instruction (sm90; Blackwell's tensor cores use tcgen05 instead)",
    "TMA": "Hopper's Tensor Memory Accelerator: copies tiles between global and shared memory in hardware",
    "mma.sync": "the tensor-core instruction of Ampere (sm80), still run on newer GPUs",
    "cp.async": "Ampere's asynchronous copy from global to shared memory",
    "FFMA": "a fused multiply-add on FP32 CUDA cores: no tensor cores involved",
    "TF32": "tensor-core arithmetic on fp32 inputs with a 10-bit mantissa; off by default for matmuls",
    "cuLaunchKernelEx": "the CUDA driver's extended kernel launch (cluster and other launch attributes)",
    "log-sum-exp": "per row of scores, log Σ exp(score): softmax's normaliser, kept for the backward pass",
    "occupancy": "the share of an SM's warp slots a kernel's blocks fill; registers and shared memory limit it",
    "dispatcher": "PyTorch's C++ router that picks the kernel for each aten op call",
    "32-bit indexing": "addressing a tensor with 32-bit offsets; past 2³¹−1 bytes PyTorch splits the work",
    "CUDA events": "GPU timestamps around unprofiled calls: the timing the verdict uses",
    "Memset": "cudaMemsetAsync, filling device memory; the profiler lists it with the kernels",
    "Kineto": "the profiler's C++ library that records GPU activity through CUPTI",
    "L2": "the GPU's last-level cache, shared by all its SMs: what a call finds there it does not read from HBM",
    "CUDA graph": "calls captured once as a graph of kernels and replayed with one launch: no per-kernel launch cost",
    "MIG": "Multi-Instance GPU: one GPU split into slices, each with its own SMs and memory",
}


# every glossary term standing as a word, found in one pass (a lookahead: overlapping uses are found too)
_TERMS = re.compile(r"(?=(?<![\w.-])(" + "|".join(map(re.escape, GLOSSARY)) + r")(?![\w-]))")


def terms_in(text: str) -> list[str]:
    """The glossary's terms that `text` uses, in glossary order."""
    used = {m.group(1) for m in _TERMS.finditer(text)}
    return [term for term in GLOSSARY if term in used]
