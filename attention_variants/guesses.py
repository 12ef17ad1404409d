"""The guess a reader would make for a variant, before anything runs: each variant carries its row (`GuessRow`, as
`Variant.guess`, in its own file), and `guess_for` reads it for a workload; `python -m profiling list` shows the rows
side by side.

Each row is what reading the variant's code suggests (its kernels, their arithmetic, whether the S×S
scores go through memory, and how it should rank for speed and host cost among them). `guess_for`
fills in what depends on the workload: no mask kernel when the attention is not causal, the arithmetic
of the inputs' dtype, aten ops instead of kernels on a CPU.
"""
from __future__ import annotations

from dataclasses import dataclass

from profiling.scores import active
from profiling.workload import BACKWARD_FLOPS, Workload


@dataclass(frozen=True)
class Expected:
    """One kernel (on a CPU: one aten op) a reader expects each call to run."""
    what: str                           # in plain words: "GEMM q·kᵀ"
    category: str                       # how the trace files it: gemm, elementwise, softmax, fused attention, triton
    op: str | None = None               # the aten op a reader would expect to launch it, where the code names one
    phase: str = "forward"              # forward | backward (a training pass)
    cpu_category: str | None = None     # how a CPU's op table files it, where not as the GPU's kernel table does


@dataclass(frozen=True)
class Guess:
    """What reading the code suggests for one workload."""
    summary: str                        # the intuition in one line: "one line, so few kernels and fast"
    kernels: tuple[Expected, ...]       # what each forward should run, in order
    precision: str                      # the arithmetic one expects for these inputs on this device
    materialises_scores: bool           # does the S×S score matrix go through memory?
    speed_rank: int                     # expected speed among the variants: 1 = fastest (ties allowed)
    host_rank: int                      # expected CPU cost per call: 1 = lightest
    occupancy: str = ""                 # what one expects Kineto's occupancy column to say (GPU only)
    backward_ratio: float | None = None  # a training pass: backward time over forward's (the anchors' FLOP model)
    saves_scores: bool | None = None    # a training pass: does autograd keep an S×S matrix for the backward?

    @property
    def kernels_per_forward(self) -> int:
        return len(self.kernels)


GEMM_QK, GEMM_PV = Expected("GEMM q·kᵀ", "gemm", "aten::bmm"), Expected("GEMM p·v", "gemm", "aten::bmm")
SCALE = Expected("scale", "elementwise", "aten::mul")
SOFTMAX = Expected("softmax", "softmax", "aten::_softmax")
SCALE_BACKWARD = Expected("scale backward", "elementwise", None, "backward")
# the backward a reader writes down for naive's ops: the gradients of p·v (two GEMMs), of the softmax, of the mask
# (a fill of the masked positions), of the scale, and of q·kᵀ (two GEMMs)
NAIVE_BACKWARD = tuple(Expected(what, category, op, "backward") for what, category, op in (
    ("GEMM dP = dO·vᵀ", "gemm", None), ("GEMM dV = Pᵀ·dO", "gemm", None),
    ("softmax backward", "softmax", None), ("mask", "elementwise", None))) + (SCALE_BACKWARD,) + \
    tuple(Expected(what, "gemm", None, "backward") for what in ("GEMM dQ = dS·k", "GEMM dK = dSᵀ·q"))


@dataclass(frozen=True)
class GuessRow:
    summary: str                        # may name {units} / {one} ("kernels" / "kernel" on a GPU, "aten ops" /
                                        # "aten op" on a CPU) and {count}
    speed_rank: int
    host_rank: int
    kernels: tuple[Expected, ...] = ()  # the causal case; MASK entries drop out when not causal
    like_naive: bool = False            # the reader expects naive's arithmetic (the math path)
    occupancy: str = ""
    backward: tuple[Expected, ...] = ()  # what its backward should run (a training pass)
    on_cpu: str = ""                     # the summary on a CPU, where the GPU's reasons do not hold


MASK = "mask"  # marks the entries that exist only with a causal mask



def guess_for(key: str, workload: Workload) -> Guess:
    """The guess for variant `key` on `workload`: its kernels as its code reads for this mask, kv heads and pass."""
    from . import VARIANTS

    variant = VARIANTS[key]
    workload = variant.runs_on(workload)  # a twin's guess is of the workload it runs (its precision fp8)
    row, scores = variant.guess, not variant.fused  # the S×S scores go through memory unless it is fused
    cpu = workload.device == "cpu"
    padding = workload.lengths is not None and not workload.causal  # a padded batch's key-padding mask
    masked = workload.causal or workload.mask == "bias" or padding
    kernels = []
    mods = [mod for mod, _ in active(workload) if VARIANTS[key].applies(mod)]
    for e in row.kernels + (row.backward if workload.training else ()):
        if e == SCALE_BACKWARD:  # each score transform's backward runs before the scale's (written out, op by op)
            kernels += [Expected(f"{mod.field} backward: {op}", "elementwise", None, "backward")
                        for mod in reversed(mods) for op in mod.backward_ops]
        if e.what == MASK:
            if not masked or (workload.mask == "bias" and e.phase == "backward"):  # a bias passes the gradient on
                continue
            if workload.mask == "bias":  # the code adds the bias instead of filling
                e = Expected("add the bias", e.category, None if row.like_naive else "aten::add", e.phase)
            elif padding:  # the math path adds the mask to the scores: no tril of its own
                e = Expected("key-padding mask", e.category, None if row.like_naive else e.op, e.phase)
            else:
                e = Expected("causal mask" if workload.mask == "flag" else f"{workload.mask} mask", e.category,
                             e.op, e.phase)
        kernels.append(e)
        if e == SCALE:  # each score transform the scaled scores go through (`scores.pipeline`), op by op
            kernels += [Expected(f"{mod.field}: {op}", "elementwise", op) for mod in mods for op in mod.ops]
    if workload.groups > 1 and VARIANTS[key].handwritten:  # the code copies k and v to every head ...
        copies = [Expected(f"repeat_interleave {t}", "copy", "aten::repeat_interleave") for t in ("k", "v")]
        kernels = copies + kernels
        if workload.training:  # ... and the backward sums their gradients back over each group
            kernels += [Expected(f"sum d{t} over the group", "reduction", None, "backward") for t in ("k", "v")]
    if cpu:  # on a CPU the table lists aten ops; flex's compiled graph runs generated C++
        kernels = [Expected(e.what, "compiled graph", None, e.phase) if e.category == "triton" else
                   Expected(e.what, e.cpu_category, e.op, e.phase) if e.cpu_category else e for e in kernels]
    forward = [e for e in kernels if e.phase == "forward"]
    count = {4: "four", 5: "five"}.get(len(forward), str(len(forward)))
    words = dict(units="aten ops" if cpu else "kernels", one="aten op" if cpu else "kernel", count=count)
    return Guess(summary=(row.on_cpu if cpu and row.on_cpu else row.summary).format(**words), kernels=tuple(kernels),
                 precision=_precision(workload, fused=variant.fused, like_naive=row.like_naive),
                 materialises_scores=scores, speed_rank=row.speed_rank, host_rank=row.host_rank,
                 occupancy="" if cpu else row.occupancy,
                 backward_ratio=BACKWARD_FLOPS if workload.training else None,
                 saves_scores=scores if workload.training else None)


def _precision(workload: Workload, fused: bool, like_naive: bool) -> str:
    dtype, sixteen_bit = workload.dtype, workload.dtype in ("fp16", "bf16")
    if workload.device == "cpu":
        return f"{dtype} arithmetic on the CPU's vector units"
    what = f"{dtype} attention" if fused else f"{dtype} GEMMs"
    if not sixteen_bit:
        return what
    return f"{what} on tensor cores" + (", like naive" if like_naive else "")
