"""What a variant is: a forward over seeded `Inputs`, a memory estimate, a check, and its traits.

Each family's file (naive, sdpa, flex, fa4, packed) declares its `Variant`s whole: the call, the memory model, the
checks, the traits and words the explainer reads, and the guess a reader would make (`guesses.GuessRow`); the
registry in `__init__` collects them.
"""
from __future__ import annotations

import contextlib
import dataclasses
from dataclasses import dataclass, field
from typing import Callable, ContextManager, Mapping, TYPE_CHECKING

from profiling import scores
from profiling.environment import Environment
from profiling.workload import QUANTISED, QUANTISING, Inputs, Refusal, Workload

from .guesses import GuessRow

if TYPE_CHECKING:  # torch, imported where a variant runs: its file is read (keys, guesses, traits) without it
    import torch

# How a variant lays out the batch's sequences (`Variant.packing`): padded to B×S ([B, H, S, D], the default), one packed
# sequence of all T tokens under a mask that keeps each document to itself ([1, H, T, D]), or the documents packed end
# to end with their offsets ([T, H, D], what varlen kernels and nested tensors read).
PACKINGS = ("padded", "block", "packed")

# What a variant's own file tells the explainer in words, by topic (`Variant.words`): the rules read these, and
# never a variant's key, so a new variant's notes come from its own file.
WORD_TOPICS = {
    "packed": "how its call over packed documents reaches its kernel (may name {backend}: the SDPA backend that ran; "
              "{op}, {lib}: the aten op called and its library, where `packed_ops` says)",
    "paged": "how it reads a paged KV cache through the page table",
    "host_path": "the Python path its call over packed documents takes on the host",
    "chooser": "its name as SDPA's own choice, for a variant whose point is that choice",
    "setup": "what its setup builds once per workload before the first call, as a noun phrase ('the block mask')",
    "setup_how": "how its setup builds that and what later calls reuse, a sentence",
    "split": "how its decode kernel splits the keys and merges the parts, where `split_kv` names its kernels (a "
             "clause the note ends with what the merge takes)",
    "host": "what its own host op's time is spent on, a noun phrase: the cause a host-bound note gives where that op "
            "leads the profiled call's CPU time",
    "first_call": "what its first call of a configuration makes, a verb phrase after its label (default: 'JIT-compiled "
                  "its kernels'), for a variant whose `jit_s` says it has such a cost",
}


# How a twin's label names its quantisation (`Variant.twins`), after its base's label.
TWIN_WORDS = {"qkv": "fp8", "kv": "fp8 KV cache"}  # e4m3: the guess and the measured line say so


@dataclass(frozen=True)
class Variant:
    key: str
    label: str
    forward: Callable[[Inputs], torch.Tensor]        # one forward, without the pin (see `pin`)
    scratch_bytes: Callable[[Workload, Environment], int]  # a call's memory beyond q, k, v and the output
    check: Callable[[Workload, Environment], str | None] = lambda workload, env: None
    setup: Callable[[Inputs], bool] | None = None   # once per workload before the first call (flex: its block mask);
                                                     # returns whether its work was found done (cached) already
    setup_bytes: Callable[[Workload, Environment], int] = lambda workload, env: 0  # what the setup allocates
    sdpa_backend: str | None = None                  # the SDPBackend it pins ("FLASH_ATTENTION"), "auto", or None
    fused: bool = False                              # meant to run as one kernel that never writes S×S
    sparse: bool = False                             # skips every tile its mask leaves empty (a block mask, a window
                                                     # argument), not only those above a causal diagonal
    compiled: bool = False                           # goes through torch.compile
    gpu_only: bool = False                           # has no CPU path: refused on a CPU (before its check)
    jit_s: tuple[float, float] | None = None         # compiles its own kernels on a configuration's first call
                                                     # (not torch.compile): a prior of the forward's, the backward's
    jit_measured_on: str = "an H200"                 # the GPU that prior was measured on, as the estimate names it
    top_left: Callable[[Inputs], torch.Tensor] | None = None  # the same call with SDPA's is_causal=True, which
                                                     # aligns the causal mask to the top left: with fewer queries than
                                                     # keys, not what a decode step needs (called once, never timed)

    packs: str | None = None                         # how it lays out packed documents ("block", "packed"; PACKINGS);
                                                     # None: it pads them to B×S
    packed_only: bool = False                        # lays out B equal sequences that way too (nested, varlen)
    in_place: bool = False                           # writes its mask into the scores in place (masked_fill_)
    score_mods: Callable[[scores.ScoreMod], bool] | tuple[str, ...] = ()  # the score transforms it applies
                                                     # (scores.SCORE_MODS): those its call has an argument for, by
                                                     # field (none: the scale and mask only), or every one (its
                                                     # scores go through scores.pipeline: scores.every), or the
                                                     # elementwise ones (a score_mod); `supports` refuses the others
    fp8: tuple[str, ...] = ()                        # the quantised inputs it takes (workload.QUANTISED): "qkv" (q,
                                                     # k and v in e4m3, their descales passed), "kv" (an e4m3 KV cache
                                                     # beside 16-bit queries, its scales passed); `supports` refuses
                                                     # the others with `no_fp8`
    no_fp8: str = ""                                 # why it takes no fp8 inputs, in its file's words ("" : a general
                                                     # sentence naming its call)
    context_parallel: Callable[[Workload], str | None] | None = None  # why context parallel cannot shard it, where
                                                     # its own file knows (flex, SDPA's FA4 route); else
                                                     # context_parallel.unsupported decides by its SDPA backend
    call: str = ""                                   # the call it makes, as a refusal names it ("varlen_attn"); an
                                                     # SDPA variant's is F.scaled_dot_product_attention
    no_split_kv_on: Mapping[str, str] = field(default_factory=dict)  # GPU (sm90) -> why its keys are never split
    packed_ops: Mapping[str, str] = field(default_factory=dict)  # the aten ops its packed call may reach -> library
    words: Mapping[str, str] = field(default_factory=dict)       # what the explainer says of it, by WORD_TOPICS
    kernel_patterns: Mapping[str, str] = field(default_factory=dict)  # a piece of its kernels' names (lower case)
                                                     # -> their category, read before trace.category's general rules
    split_kv: tuple[str, str] | None = None          # pieces of (its decode kernel's, its merge kernel's) names, lower
                                                     # case: a decode step that launches the merge split the keys
    guess: GuessRow | None = None                    # what reading its code suggests (guesses.guess_for reads it)
    twin_of: Variant | None = None                   # an fp8 twin (`twins`): the variant it runs, on the 16-bit
    quantises: str | None = None                     # workload it is given with `quantises` (QUANTISED) in fp8

    def twins(self) -> tuple["Variant", ...]:
        """Its fp8 twins, one for each quantisation it takes (`fp8`), made by one rule: the same variant, given a
        16-bit workload, run on that workload with the quantisation applied (`effective`), so one comparison sets
        it in fp8 beside itself (or any variant) in 16 bits on the same drawn values."""
        return tuple(dataclasses.replace(self, key=f"{self.key}_fp8", label=f"{self.label}, {TWIN_WORDS[what]}",
                                         fp8=(), twin_of=self, quantises=what) for what in self.fp8)

    def effective(self, workload: Workload) -> Workload:
        """The workload it runs when given `workload`: a twin's with its quantisation applied (`Workload.quantise`),
        any other variant's unchanged. Idempotent: a twin's run's own workload is its effective one already."""
        return workload.quantise(self.quantises) if self.quantises else workload

    def runs_on(self, workload: Workload) -> Workload:
        """`effective`, as an estimate reads it (the budget, the guess): the given workload where the twin's
        quantisation refuses it (`supports` says so, and it is never run)."""
        try:
            return self.effective(workload)
        except Refusal:
            return workload

    @property
    def help(self) -> str:
        """What a menu's tooltip says of it: for a twin, what it is; "" for the others."""
        if not self.quantises:
            return ""
        name, value = QUANTISING[self.quantises]
        return (f"{self.twin_of.label} given {QUANTISED[self.quantises]}: the 16-bit workload's values quantised "
                f"per tensor ({name}={value}), so it can stand beside {self.twin_of.key} or any 16-bit variant on "
                "the same drawn values")

    def packing(self, workload: Workload) -> str:
        """How this variant lays out `workload`'s sequences (PACKINGS)."""
        return self.packs if self.packs and (workload.lengths is not None or self.packed_only) else "padded"

    def skips_masked_tiles(self, workload: Workload) -> bool:
        """Whether its work follows the mask's pairs: a fused kernel given the causal flag skips the tiles above the
        diagonal, a sparse one (a block mask, a window argument) every empty tile; given a dense mask, or written as
        plain ops, it computes every pair. The one answer: the cost model, the sweeps' expected growth and the work
        below read it."""
        return self.sparse or (self.fused and workload.mask == "flag")

    def forward_flops(self, workload: Workload) -> float:
        """The FLOPs one forward computes: the mask's pairs where it skips masked tiles (`Workload.flops`), every pair
        where it cannot (`Workload.dense_flops`). A call's: times PASS_FLOPS[workload.call_passes]."""
        return workload.flops if self.skips_masked_tiles(workload) else workload.dense_flops

    def leaves(self, x: Inputs) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """q, k and v as this variant reads them: a training pass's gradients land on these."""
        if self.packing(x.workload) == "padded":
            return x.q, x.k, x.v
        p = x.packed()
        return p.q, p.k, p.v

    def grad_out(self, x: Inputs) -> torch.Tensor | None:
        """The fixed gradient of the output, in this variant's layout."""
        packing = self.packing(x.workload)
        if packing == "padded":
            return x.grad_out
        g = x.packed().grad_out
        return g.transpose(0, 1).unsqueeze(0) if packing == "block" else g

    def supports(self, workload: Workload, env: Environment) -> str | None:
        """None when this variant can run here, else the reason it cannot: on a CPU where it is GPU-only, fp8 inputs it
        does not take (`fp8`), a score transform it does not apply (`score_mods`), then its own check."""
        if self.quantises:
            return self._twin_refusal(workload, env)
        if self.gpu_only and workload.device != "cuda":
            return f"{self.label} runs on NVIDIA GPUs only"
        quantised = workload.quantised
        if quantised and quantised not in self.fp8:
            from . import VARIANTS
            takers = [v.key for v in VARIANTS.values() if quantised in v.fp8]
            field, instead = ("dtype", "choose dtype bf16") if quantised == "qkv" else ("kv_dtype", "leave it empty")
            why = self.no_fp8 or f"{self.calls} takes no fp8 inputs"
            return (f"{why}; {field}=fp8 ({QUANTISED[quantised]}) runs on {', '.join(takers) or 'none'} in this tool: "
                    f"{instead}" + (f", or choose {'it' if len(takers) == 1 else 'one of those'}" if takers else ""))
        for mod, _ in scores.active(workload):
            if not self.applies(mod):
                from . import VARIANTS
                takers = ", ".join(v.key for v in VARIANTS.values() if v.applies(mod))
                return (f"{self.calls} has no {mod.field} ({mod.said} before the mask): leave {mod.field} empty, or "
                        f"choose a variant that applies it ({takers})")
        return self.check(workload, env)

    def _twin_refusal(self, workload: Workload, env: Environment) -> str | None:
        """A twin's `supports`: it quantises a 16-bit workload itself, so one quantised already, or one its
        quantisation cannot apply to, is refused naming the field; else its base's reason on the effective
        workload."""
        base, (name, value) = self.twin_of, QUANTISING[self.quantises]
        if workload.quantised:
            field_, said = QUANTISING[workload.quantised]
            return (f"{self.key} quantises a 16-bit workload itself ({name}={value} on its side only), and "
                    f"{field_}={said} quantises it already: choose {base.key} on this fp8 workload, or "
                    f"leave {field_} empty" + (" (dtype bf16)" if field_ == "dtype" else ""))
        try:
            effective = self.effective(workload)
        except Refusal as error:  # the field's own reason, less its advice to leave the field empty: the twin sets it
            limit = error.limit.split(f", or leave {name} empty")[0].rstrip(". ")
            return f"{self.key} runs {base.key} with {name}={value} on its side, which this workload cannot take: {limit}"
        if effective.unquantised != workload:  # its fp8 values would not be this workload's drawn values
            return (f"{self.key} quantises the values a {effective.drawn} workload draws, not those of dtype="
                    f"{workload.dtype} beside it: choose dtype {effective.drawn}")
        return base.supports(effective, env)

    def applies(self, mod: scores.ScoreMod) -> bool:
        """Whether it applies the score transform `mod` (`score_mods`)."""
        return self.score_mods(mod) if callable(self.score_mods) else mod.field in self.score_mods

    @property
    def calls(self) -> str:
        """The call it makes, as a refusal names it."""
        return self.call or ("F.scaled_dot_product_attention" if self.sdpa_backend else self.label)

    def __post_init__(self):
        unknown = set(self.words) - set(WORD_TOPICS)
        assert not unknown, f"{self.key}: words on unknown topics {unknown} (base.WORD_TOPICS)"
        assert not self.split_kv or "split" in self.words, f"{self.key}: split_kv without its words on 'split'"

    @property
    def handwritten(self) -> bool:
        """Written as plain tensor ops (no attention op, no compiler, no fused kernel): each op its code writes is a
        launch of its own."""
        return self.sdpa_backend is None and not (self.fused or self.compiled)

    @property
    def pinned(self) -> bool:
        return self.sdpa_backend not in (None, "auto")

    def pin(self) -> ContextManager:
        """The `sdpa_kernel` context a pinned variant runs in (a no-op for the others). Measurement enters
        it once around a loop of forwards, so a call's figures are SDPA's and the pin is costed apart."""
        if not self.pinned:
            return contextlib.nullcontext()
        from torch.nn.attention import SDPBackend, sdpa_kernel
        return sdpa_kernel(getattr(SDPBackend, self.sdpa_backend))
