"""The workload: one validated attention problem, its inputs and its FLOPs.

Every field carries how it is named, read and spelled outside Python (`Spec`): the page's controls, a link's query, the
command line and the API are all built by iterating `FIELDS`, never by spelling the fields out. Everything is
checked before a single tensor is allocated, so a bad request costs nothing and says exactly which field was
wrong. What a workload costs in memory and time is `budget.py`'s.
"""
from __future__ import annotations

import dataclasses
import re
import zlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:  # torch is imported where tensors are made: the command line parses and refuses without it
    import torch

DTYPES = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16", "fp8": "float8_e4m3fn"}  # torch's names of them
DTYPE_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2, "fp8": 1}
# fp8 is e4m3 (OCP's float8_e4m3fn: 4 exponent bits, 3 mantissa bits, no infinities, largest finite 448). Its values are
# drawn in DRAWN's dtype (the same seeded values as a bf16 workload's), then quantised per tensor: scale = amax / FP8_MAX,
# the fp8 tensor x / scale, and the scale is what a kernel multiplies back (its "descale"). The output is in DRAWN's.
FP8_MAX = 448.0
DRAWN = {"fp8": "bf16"}
# What is quantised (`Workload.quantised`), in words: every input (dtype fp8), or the KV cache beside 16-bit queries
# (kv_dtype fp8: a decode step's cache, as serving engines keep it).
QUANTISED = {"qkv": "q, k and v in e4m3", "kv": "an e4m3 KV cache"}
# The field (and its value) that makes each quantisation of a 16-bit workload (`Workload.quantise`): the one route to
# an fp8 workload, whether a request sets the field or a variant's fp8 twin applies it to its side alone.
QUANTISING = {"qkv": ("dtype", "fp8"), "kv": ("kv_dtype", "fp8")}


class Refusal(ValueError):
    """A request that cannot be run, naming the field, the value and why: `kind` says which check refused it
    ("invalid" input, "memory" or "time" over budget, "unrecorded" in a recording), and for a budget the
    amount `needed` against the amount `available` (bytes or seconds)."""

    def __init__(self, field: str, value, limit: str, kind: str = "invalid", needed: float | None = None,
                 available: float | None = None):
        self.field, self.value, self.limit = field, value, limit
        self.kind, self.needed, self.available = kind, needed, available
        if kind != "invalid":
            said = limit
        elif value is None:
            said = f"{field} was not given: {limit}"
        else:
            said = f"{field}={shown(value)} is not allowed: {limit}"
        super().__init__(said)

    def __reduce__(self):  # ZeroGPU pickles errors out of its worker: keep the fields
        return Refusal, (self.field, self.value, self.limit, self.kind, self.needed, self.available)


_SHOWN_CHARS = 60


def shown(value) -> str:
    """A client's value as an error quotes it: its repr, cut short (a number past Python's 4,300-digit
    limit cannot even be printed, and a megabyte string has no place in a message)."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 200:
        return f"<a whole number of about {int(value.bit_length() * 0.30103) + 1} digits>"
    if isinstance(value, str) and len(value) > _SHOWN_CHARS:
        return f"{value[:_SHOWN_CHARS]!r}… ({len(value)} characters)"
    text = repr(value)
    if len(text) <= _SHOWN_CHARS:
        return text
    return f"{text[:_SHOWN_CHARS]}… ({len(value)} items)" if isinstance(value, (list, tuple)) else \
        f"{text[:_SHOWN_CHARS]}… ({type(value).__name__})"


def whole_number(field: str, value, low: int, high: int) -> int:
    """`value` if it is an int (not a bool, a float, a numeric string) within [low, high]; else a Refusal.
    Nothing is rounded or converted: 128.7, 3.0, True and "64" are refused, not read as 128, 3, 1 and 64."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise Refusal(field, value, f"must be a whole number between {low} and {high}")
    if not low <= value <= high:
        raise Refusal(field, value, f"must be between {low} and {high}")
    return value


def whole_number_from_text(field: str, text: str, low: int, high: int) -> int:
    """A whole number written as text (a link's query, a command line), within [low, high]: ASCII digits only
    (not '１２８', '٣٢' or '1_024', which int() would take); a long run of digits is refused before int() sees it."""
    digits = text.strip() if isinstance(text, str) else ""
    if not (digits.isascii() and digits.isdigit()):
        raise Refusal(field, text, f"must be a whole number between {low} and {high}")
    if len(digits.lstrip("0")) > len(str(high)):
        raise Refusal(field, text, f"must be between {low} and {high}")
    return whole_number(field, int(digits), low, high)


def real_number(field: str, value, low: float, high: float) -> float:
    """`value` as a float if it is a number (an int or a float, not a bool or a numeric string) above `low` and at most
    `high`; else a Refusal (NaN and infinity are not numbers here)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value or value in (
            float("inf"), float("-inf")):
        raise Refusal(field, value, f"must be a number above {low} and at most {high}")
    if not low < value <= high:
        raise Refusal(field, value, f"must be above {low} and at most {high}")
    return float(value)


_DECIMAL = re.compile(r"[0-9]+(\.[0-9]*)?([eE][-+]?[0-9]+)?|\.[0-9]+([eE][-+]?[0-9]+)?")


def real_number_from_text(field: str, text: str, low: float, high: float) -> float:
    """A number written as text (a link's query, a command line): ASCII decimal digits, a point, an exponent (not
    'nan', 'inf', '1_0' or '５０', which float() would take), above `low` and at most `high`."""
    number = text.strip() if isinstance(text, str) else ""
    if len(number) > 32 or not _DECIMAL.fullmatch(number):
        raise Refusal(field, text, f"must be a number above {low} and at most {high}")
    return real_number(field, float(number), low, high)


def spell_real(value: float) -> str:
    """A float as a link and a file name write it: the shortest text that reads back the same ('50', '30.5')."""
    text = repr(float(value))
    return text[:-2] if text.endswith(".0") else text


def choice(field: str, value, choices) -> str:
    """`value` if it is one of `choices`, exactly (same type, same spelling: 3.0 is not "3", "BF16" not "bf16");
    else a Refusal listing them."""
    choices = list(choices)
    if not any(type(value) is type(c) and value == c for c in choices):
        raise Refusal(field, value, f"choose one of {', '.join(map(str, choices))}")
    return value


# -- the fields, and how each is named outside Python ------------------------------------------------
@dataclass(frozen=True)
class Spec:
    """How a workload field is shown and read: its control's label, its name in a link and on the command
    line, what values it takes (whole numbers within `limits`, one of `choices`, or true/false), and what it means
    wherever a workload is spelled: in words (`said`) and in a trace file's name (`tag`). A field whose `said` or
    `tag` gives "" for a value is not spelled there; without `tag`, a value other than the default is spelled
    `_<query><value>`, so a new field can never make two workloads' traces collide."""
    label: str
    query: str                                   # the link's key and, with dashes, the CLI option
    limits: tuple[int, int] | None = None        # whole numbers within these, inclusive (with `real`: numbers above
                                                 # the first, at most the second)
    real: bool = False                           # a real number (a float), not a whole one
    choices: tuple = ()                          # exactly one of these
    labels: tuple[str, ...] = ()                 # the choices as the page names them
    boolean: bool = False
    optional: bool = False                       # may be None (the page and the link leave it empty)
    help: str = ""
    empty: str = ""                              # what an optional field left empty means, in a word or two
    said: Callable[[Any], str] | None = None     # the value in a workload's words ("B=8"); None: the value itself
    tag: Callable[[Any], str] | None = None      # the value in a trace file's name ("B8")
    page: bool = True                            # a control on the page (the API, links and CLI take every field)
    items: int = 0                               # a list of at most this many whole numbers within `limits`, sent
                                                 # as text ("512, 1536") or a list; 0: one value
    example: str = ""                            # a list field's value as an example spells it

    def check(self, name: str, value):
        if self.optional and (value is None or (value == "" and self.choices)):  # a menu's empty entry: none
            return None
        if self.items:
            return self._listed(name, value)
        if self.boolean:
            if not isinstance(value, bool):
                raise Refusal(name, value, "must be true or false")
            return value
        if self.limits:
            return (real_number if self.real else whole_number)(name, value, *self.limits)
        return choice(name, value, self.choices)

    def parse(self, name: str, text: str):
        """The value a link or a command line spells as `text`: the same rule everywhere, no aliases."""
        if self.optional and text == "":
            return None
        if self.items:
            return self._listed(name, text)
        if self.boolean:
            if text not in ("true", "false"):
                raise Refusal(name, text, "must be true or false")
            return text == "true"
        if self.limits:
            return (real_number_from_text if self.real else whole_number_from_text)(name, text, *self.limits)
        spelled = {str(c): c for c in self.choices}
        return spelled[choice(name, text, spelled)]

    def spell(self, value) -> str:
        """`value` as a link writes it (`parse` reads it back)."""
        if value is None:
            return ""
        if self.items:
            return ",".join(map(str, value))
        if self.real:
            return spell_real(value)
        return ("true" if value else "false") if self.boolean else str(value)

    def _listed(self, name: str, value) -> tuple[int, ...] | None:
        """A list field's value as a tuple, from text ("512, 1536": ASCII digits, commas or spaces between) or a
        list of whole numbers, each within `limits`, at most `items` of them; empty text means None where optional."""
        low, high = self.limits
        sent = value  # what a refusal quotes: the client's value, not what it was read as
        if isinstance(value, str):
            if len(value) > self.items * (len(str(high)) + 2) + 16:
                raise Refusal(name, value, f"at most {self.items} numbers between {low} and {high}")
            parts = value.replace(",", " ").split()
            if not parts and self.optional:
                return None
            value = tuple(whole_number_from_text(name, part, low, high) for part in parts)
        elif isinstance(value, (list, tuple)):
            value = tuple(whole_number(name, item, low, high) for item in value)
        else:
            raise Refusal(name, value, f"a list of numbers between {low} and {high}, such as {self.example}")
        if not value:
            raise Refusal(name, value, f"give at least one number, such as {self.example}")
        if len(value) > self.items:
            raise Refusal(name, sent, f"at most {self.items} numbers ({len(value)} given)")
        return value


def spec(default, **kwargs):
    return field(default=default, metadata={"spec": Spec(**kwargs)})


def _unless(default, words: str) -> Callable[[Any], str]:
    """Said as `words` (with {} for the value) unless the value is `default`."""
    return lambda value: "" if value == default else words.format(value)


PASSES = ("fwd", "fwd+bwd", "bwd")       # forward (inference, no autograd), a training step, its backward alone
MASKS = ("flag", "bool", "bias", "window")
# A backward is 2.5 forwards of FLOPs: the anchors' model (tritonbench, attention-gym); the only place it is set.
BACKWARD_FLOPS = 2.5
PASS_FLOPS = {"fwd": 1.0, "fwd+bwd": 1.0 + BACKWARD_FLOPS, "bwd": BACKWARD_FLOPS}
# How each call is timed (timing.py): warm (the last call's data still in L2), cold (the L2 flushed before each timed
# call, as tritonbench and FlashInfer time), graph (N calls captured in one CUDA graph and replayed, as serving
# engines run them). cold and graph time a GPU.
TIMINGS = ("warm", "cold", "graph")
# Context parallelism (profiling/context_parallel.py): the sequence sharded over this many GPUs, K/V passed between them
# by PyTorch's all-gather (its default) or all-to-all rotation (`set_rotate_method`).
GPU_COUNTS = (1, 2, 4, 8)
CP_ROTATES = ("allgather", "alltoall")
# Packed sequences: at most this many documents in a batch, and at most as many tokens in all as S may have (one packed
# sequence of them all is what a block-diagonal mask and the varlen kernels read)
MAX_DOCUMENTS = 64
MAX_TOKENS = 131072


def _documents_said(lengths: tuple[int, ...] | None) -> str:
    """'documents 512, 1536, 1024, 1024 packed' (a long list by its count, total and range)."""
    if lengths is None:
        return ""
    if len(lengths) <= 8:
        return f"documents {', '.join(map(str, lengths))} packed"
    return f"{len(lengths)} documents of {min(lengths)}…{max(lengths)} packed, {sum(lengths)} tokens"


def _documents_tag(lengths: tuple[int, ...] | None) -> str:
    """'_docs4t4608h1a2b3c4d': the count, the total and a checksum of the list (a file name stays short)."""
    if lengths is None:
        return ""
    return f"_docs{len(lengths)}t{sum(lengths)}h{zlib.crc32(','.join(map(str, lengths)).encode()):08x}"


@dataclass(frozen=True)
class Workload:
    """One attention problem. Its fields, in the order they are said: batch, heads (and kv heads), the key/value
    length S (and the query length, when fewer queries than keys), head dim, dtype, the causal pattern and how it
    reaches the kernel, the input rank, the pass and how its calls are timed. Every size, count and pair below derives from these."""
    batch: int = spec(8, label="batch B", query="batch", limits=(1, 1024), said="B={}".format, tag="B{}".format)
    heads: int = spec(16, label="heads H", query="heads", limits=(1, 1024), said="H={}".format, tag="H{}".format)
    kv_heads: int | None = spec(None, label="kv heads", query="kv_heads", limits=(1, 1024), optional=True,
                                empty="as H", help="fewer than H: grouped-query attention (1: multi-query); empty: "
                                                   "as many as H", said=_unless(None, "kv {}"), tag=_unless(None, "kv{}"))
    seq_len: int = spec(1024, label="seq length S", query="seq", limits=(1, 131072),
                        help="keys and values per sequence (and queries, unless q_len is set)", said="S={}".format,
                        tag="S{}".format)
    lengths: tuple[int, ...] | None = spec(
        None, label="document lengths", query="lengths", limits=(1, 131072), items=MAX_DOCUMENTS, optional=True,
        empty="B × S", example="'512, 1536, 1024, 1024'",
        help="packed sequences: the documents' lengths (such as 512, 1536, 1024, 1024), each token attending its own "
             "document only; B is their count and S the longest; empty: B equal sequences of S",
        said=_documents_said, tag=_documents_tag)
    q_len: int | None = spec(None, label="query length", query="q_len", limits=(1, 131072), optional=True,
                             empty="as S", help="queries per sequence, the last q_len of the S positions (a decode "
                                                "step: 1); empty: as many as S",
                             said=_unless(None, "q_len {}"), tag=_unless(None, "q{}"))
    page_size: int | None = spec(None, label="page size", query="page_size", limits=(16, 256), optional=True,
                                 empty="none", help="tokens per page of a paged KV cache (a power of two; needs "
                                                         "q_len): k and v are read through a page table from a "
                                                         "shuffled pool; empty: one contiguous cache",
                                 said=_unless(None, "pages of {}"), tag=_unless(None, "_p{}"))
    head_dim: int = spec(64, label="head dim D", query="head_dim", limits=(1, 512), said="D={}".format,
                         tag="D{}".format)
    dtype: str = spec("bf16", label="dtype", query="dtype", choices=tuple(DTYPES), tag="_{}".format,
                      help="the inputs' dtype; fp8: e4m3, q, k and v drawn in bf16 and quantised per tensor (amax/448) "
                           "with their descales, the output in bf16")
    kv_dtype: str | None = spec(None, label="KV dtype", query="kv_dtype", choices=("fp8",), optional=True,
                                empty="as dtype", help="fp8: a decode step's KV cache in e4m3 (k and v quantised per "
                                                       "tensor, amax/448) beside 16-bit queries; empty: as dtype",
                                said=_unless(None, "{} KV cache"), tag=_unless(None, "_kv{}"))
    causal: bool = spec(True, label="causal", query="causal", boolean=True,
                        said=lambda on: "causal" if on else "not causal", tag=lambda on: "_causal" if on else "_full")
    mask: str = spec("flag", label="mask", query="mask", choices=MASKS,
                     labels=("is_causal flag", "explicit bool mask", "additive bias", "sliding window"),
                     help="how the causal pattern reaches the kernel; the bias adds a distance penalty",
                     said={"flag": "", "bool": "explicit bool mask", "bias": "additive bias", "window": ""}.get,
                     tag={"flag": "", "bool": "_bool", "bias": "_bias", "window": ""}.get)
    window: int | None = spec(None, label="window W", query="window", limits=(1, 131072), optional=True,
                              empty="none", help="mask=window: each query sees itself and the W-1 keys before it",
                              said=_unless(None, "window {}"), tag=_unless(None, "_w{}"))
    softcap: float | None = spec(None, label="softcap", query="softcap", limits=(0, 1000), real=True, optional=True,
                                 empty="none", help="logit soft-capping (Gemma 2): each scaled score s becomes "
                                                    "cap·tanh(s/cap) before the mask; empty: none",
                                 said=lambda cap: "" if cap is None else f"softcap {spell_real(cap)}")
    rank: int = spec(4, label="input rank", query="rank", choices=(4, 3),
                     labels=("4 · [B, H, S, D]", "3 · [B·H, S, D]"), said=_unless(4, "rank {}"), tag="_r{}".format)
    passes: str = spec("fwd", label="pass", query="pass", choices=PASSES,
                       labels=("forward", "forward + backward", "backward only"),
                       help="a training step: inputs that require grad, gradients reset between steps",
                       said={"fwd": "", "fwd+bwd": "forward + backward", "bwd": "backward"}.get,
                       tag={"fwd": "", "fwd+bwd": "_train", "bwd": "_bwd"}.get)
    timing: str = spec("warm", label="timing", query="timing", choices=TIMINGS,
                       labels=("warm: data left in L2", "cold: L2 flushed before each call",
                               "CUDA graph: calls replayed"),
                       help="how each call is timed: warm (what the call before left in L2 still there), cold (a "
                            "buffer twice the L2 written before each call, outside the timing) or in a CUDA graph "
                            "(calls captured once and replayed: no launch cost); cold and graph need a GPU",
                       said={"warm": "", "cold": "cold L2", "graph": "CUDA graph"}.get,
                       tag={"warm": "", "cold": "_cold", "graph": "_graph"}.get)
    gpus: int = spec(1, label="GPUs", query="gpus", choices=GPU_COUNTS,
                     help="context parallel: the sequence sharded over this many GPUs, one process each (PyTorch's "
                          "torch.distributed.tensor.experimental.context_parallel); 1: one GPU",
                     said=_unless(1, "{}-way context parallel"), tag=_unless(1, "_cp{}"), page=False)   # no rank view yet
    cp_rotate: str = spec("allgather", label="K/V rotation", query="cp_rotate", choices=CP_ROTATES,
                          labels=("all-gather: the whole K/V on every GPU", "all-to-all: one shard at a time"),
                          help="how context parallel passes K/V between GPUs (gpus > 1): all-gather (PyTorch's "
                               "default) or all-to-all",
                          said={"allgather": "", "alltoall": "K/V by all-to-all"}.get, tag=_unless("allgather", "_{}"), page=False)
    device: str = "cuda"    # cuda | cpu: where it runs (the source decides, not a control)
    seed: int = 0

    def __post_init__(self):
        for f in FIELDS:  # a list field's value is kept as the tuple its spec reads (a list from JSON, text from a link)
            object.__setattr__(self, f.name, f.metadata["spec"].check(f.name, getattr(self, f.name)))
        if self.lengths is not None:
            self._check_documents()
        if not isinstance(self.device, str) or self.device not in ("cuda", "cpu"):
            raise Refusal("device", self.device, "must be 'cuda' or 'cpu'")
        whole_number("seed", self.seed, 0, 2**63 - 1)
        if self.device == "cpu" and self.timing != "warm":
            raise Refusal("timing", self.timing, "cold and graph time a GPU (its L2 flushed before each call; calls "
                                                 "replayed in a CUDA graph): on a CPU choose warm")
        # one workload, one spelling: as many kv heads as heads is plain MHA, as many queries as keys the square case
        if self.kv_heads == self.heads:
            object.__setattr__(self, "kv_heads", None)
        if self.q_len == self.seq_len:
            object.__setattr__(self, "q_len", None)
        if self.kv_heads is not None:
            if self.kv_heads > self.heads or self.heads % self.kv_heads:
                raise Refusal("kv_heads", self.kv_heads, f"must divide heads={self.heads} (query heads share kv "
                                                         "heads in equal groups)")
            if self.rank == 3:
                raise Refusal("kv_heads", self.kv_heads, "grouped-query attention needs rank 4 ([B, H, S, D]): a "
                                                         "rank-3 input folds the heads into the batch")
        if self.q_len is not None:
            if self.q_len > self.seq_len:
                raise Refusal("q_len", self.q_len, f"must be between 1 and S={self.seq_len} (the queries are the "
                                                   "last q_len positions of the sequence)")
            if self.training:
                raise Refusal("q_len", self.q_len, "a decode step is inference: a training pass needs as many "
                                                   "queries as keys (leave q_len empty)")
        if self.page_size is not None:
            self._check_pages()
        if self.kv_dtype is not None:
            if self.dtype not in ("fp16", "bf16"):
                raise Refusal("kv_dtype", self.kv_dtype, f"an fp8 KV cache is read beside 16-bit queries: choose dtype "
                                                         f"bf16 or fp16 (dtype={self.dtype}"
                              + (" quantises k and v already: leave kv_dtype empty)" if self.dtype == "fp8" else ")"))
            if self.q_len is None:
                raise Refusal("kv_dtype", self.kv_dtype, "an fp8 KV cache is read by a decode step: set q_len (the new "
                                                         "queries against the cache), or leave kv_dtype empty")
        if self.gpus > 1 or self.cp_rotate != "allgather":
            self._check_context_parallel()
        if self.mask in ("bool", "window") and not self.causal:
            raise Refusal("mask", self.mask, f"mask={self.mask} is a causal pattern: set causal=true, or choose "
                                             "flag (no mask) or bias")
        if self.mask == "window":
            if self.window is None:
                raise Refusal("window", None, f"mask=window needs a window between 1 and S={self.seq_len}")
            if self.window > self.seq_len:
                raise Refusal("window", self.window, f"must be between 1 and S={self.seq_len}")
        elif self.window is not None:
            raise Refusal("window", self.window, "applies with mask=window only: leave it empty")

    def _check_documents(self) -> None:
        """Packed documents set B (their count) and S (the longest): those fields follow from them. What they cannot be
        combined with, and why: a decode step's q_len and its paged cache (packed documents are a prefill or a training
        step: each document's queries are its own tokens), context parallel (it shards one sequence per batch row),
        rank 3 (the heads folded into the batch leave no document to keep apart), and a mask other than the flag (each
        way sets the documents' pattern its own way: padding, a block-diagonal mask, offsets)."""
        n = self.lengths
        object.__setattr__(self, "batch", len(n))
        object.__setattr__(self, "seq_len", max(n))
        if sum(n) > MAX_TOKENS:
            raise Refusal("lengths", n, f"the documents hold {sum(n)} tokens: at most {MAX_TOKENS} in all (one packed "
                                        "sequence of them is what a block-diagonal mask and varlen kernels read)")
        if self.q_len is not None:
            raise Refusal("lengths", n, "packed documents are a prefill or a training step, each document's queries "
                                        "its own tokens: leave q_len empty")
        if self.page_size is not None:
            raise Refusal("lengths", n, "a paged cache is read by a decode step, and packed documents are a prefill: "
                                        "leave page_size empty")
        if self.gpus > 1:
            raise Refusal("lengths", n, "context parallel shards one sequence per batch row here, not packed "
                                        "documents: choose gpus=1")
        if self.rank == 3:
            raise Refusal("lengths", n, "rank 3 folds the heads into the batch, where no document boundary is kept: "
                                        "choose rank 4")
        if self.mask != "flag":
            raise Refusal("lengths", n, f"each document attends only itself, causally or not, and each way sets that "
                                        f"its own way (padding, a block-diagonal mask, offsets), not mask={self.mask}: "
                                        "choose mask=flag")

    def _check_pages(self) -> None:
        """A paged cache is what a decode step reads: the queries are new tokens, the keys a cache written before them
        (a prefill writes the cache it would read, and a training pass has none), so it needs q_len; k and v are
        whole pages of [page_size, kv heads, D], so rank 4 and S a multiple of the page; and the page table maps
        positions, which a dense [Lq, S] mask does not follow, so the causal flag or no mask."""
        ps = self.page_size
        if ps & (ps - 1):
            raise Refusal("page_size", ps, "must be a power of two between 16 and 256")
        if self.q_len is None:
            raise Refusal("page_size", ps, "a paged KV cache is read by a decode step: set q_len (the new queries "
                                           "against the cache), or leave page_size empty")
        if self.rank == 3:
            raise Refusal("page_size", ps, "a paged cache holds [pages, page_size, kv heads, D]: it needs rank 4")
        if self.seq_len % ps:
            raise Refusal("page_size", ps, f"S={self.seq_len} must be a whole number of pages: choose a page size "
                                           "that divides S")
        if self.mask != "flag":
            raise Refusal("page_size", ps, f"a paged cache is read here with the causal flag or no mask, not "
                                           f"mask={self.mask}: the page table maps key positions, which a dense "
                                           "[Lq, S] mask does not follow")

    def _check_context_parallel(self) -> None:
        """What PyTorch's context parallel takes (torch/distributed/tensor/experimental/_context_parallel/_attention.py,
        read for torch 2.14), refused in its words: SDPA's causal flag or no mask (its ring handlers raise "attn_bias
        is not supported yet"), as many queries as keys ("is_causal requires the same query and context sequence
        lengths"), the sequence at dim 2 of [B, H, S, D] ("seq_dim = 2", hard-coded), and S in 2·gpus equal chunks
        for the head-tail load balancer (`_create_default_load_balancer`: otherwise it is silently switched off)."""
        n = self.gpus
        if n == 1:
            raise Refusal("cp_rotate", self.cp_rotate, "applies with gpus > 1 only (K/V move between GPUs): leave it "
                                                       "allgather")
        if self.mask != "flag":
            raise Refusal("gpus", n, f"context parallel takes the causal flag or no mask, not mask={self.mask}: its "
                                     "ring handlers raise \"attn_bias is not supported yet\"")
        if self.q_len is not None:
            raise Refusal("gpus", n, "context parallel needs as many queries as keys: PyTorch raises \"is_causal "
                                     "requires the same query and context sequence lengths\" (leave q_len empty)")
        if self.rank == 3:
            raise Refusal("gpus", n, "context parallel shards dim 2 of [B, H, S, D] (seq_dim = 2 in PyTorch's ring "
                                     "handlers): it needs rank 4")
        if self.timing != "warm":
            raise Refusal("gpus", n, "a context-parallel step is timed warm here (NCCL kernels do not go into this "
                                     "app's cold flush or CUDA graph): choose timing=warm")
        chunks = 2 * n if self.causal else n
        if self.seq_len % chunks:
            raise Refusal("seq_len", self.seq_len,
                          f"with gpus={n} S must split into {chunks} equal chunks"
                          + (" (the load balancer gives each GPU one chunk from the head and one from the tail; "
                             "PyTorch switches it off silently otherwise)" if self.causal else "")
                          + f": choose a multiple of {chunks}")

    @classmethod
    def blog(cls, **changes) -> "Workload":
        """The blog post's workload: B=8, H=16, S=1024, D=64, bf16, causal, rank 4, forward (`NAMED["blog"]`)."""
        return dataclasses.replace(NAMED["blog"], **changes)

    @classmethod
    def cpu_default(cls, **changes) -> "Workload":
        """Small enough that every variant runs in well under a second on a laptop CPU (`NAMED["cpu"]`)."""
        return dataclasses.replace(NAMED["cpu"], **changes)

    def replace(self, **changes) -> "Workload":
        return dataclasses.replace(self, **changes)

    def changes(self) -> dict:
        """This workload as changes to the blog's: the fields it sets apart (what a preset or a test applies to its
        own base)."""
        blog = NAMED["blog"]
        return {f.name: getattr(self, f.name) for f in FIELDS if getattr(self, f.name) != getattr(blog, f.name)}

    # -- the problem in words and in a file name: every field as its spec spells it --------------------------
    def _spelled(self, how: str, skip: tuple[str, ...] = ()) -> list[str]:
        spelled = []
        for f in FIELDS:
            if f.name in skip:
                continue
            spec_, value = f.metadata["spec"], getattr(self, f.name)
            rule = getattr(spec_, how)
            if rule is not None:
                spelled.append(rule(value) or "")
            elif how == "said":
                spelled.append(spec_.spell(value))
            else:
                spelled.append("" if value == f.default else f"_{spec_.query}{spec_.spell(value)}")
        return [s for s in spelled if s]

    def words(self) -> str:
        """The problem as every sentence and label names it: 'B=8, H=16, S=1024, D=64, bf16, causal' (each field as
        its spec says it, the defaults of the optional ones not; no device: a recording's GPU and a live CPU hold the
        same problem)."""
        return ", ".join(self._spelled("said"))

    def family(self, axis: str = "seq_len") -> str:
        """The workload with one field left free, as a sweep varies it: 'B=8, H=16, D=64, bf16, causal'."""
        return ", ".join(self._spelled("said", skip=(axis,)))

    def problem(self, free: tuple[str, ...] = ()) -> tuple:
        """The problem as a key: every field's value (device and seed set aside: they do not change the problem), but
        those left `free` (a sweep's axis)."""
        return tuple(getattr(self, f.name) for f in FIELDS if f.name not in free)

    def tag(self) -> str:
        """The problem in a file name: 'B8H16S1024D64_bf16_causal_r4' (every field, as its spec tags it)."""
        return "".join(self._spelled("tag"))

    # -- shapes and sizes: the one place each is derived ----------------------------------------------------
    @property
    def torch_dtype(self) -> torch.dtype:
        """q's dtype as the kernel is handed it (float8_e4m3fn for fp8)."""
        import torch

        return getattr(torch, DTYPES[self.dtype])

    @property
    def drawn(self) -> str:
        """The dtype the values are drawn in and the output is written in: bf16 for fp8, else the dtype itself (what
        plain attention beside the kernel runs in, and what the cost model prices)."""
        return DRAWN.get(self.dtype, self.dtype)

    @property
    def quantised(self) -> str | None:
        """What is quantised to fp8 (QUANTISED): "qkv" (dtype fp8), "kv" (kv_dtype fp8: the cache only), or None."""
        return "qkv" if self.dtype == "fp8" else "kv" if self.kv_dtype == "fp8" else None

    def quantise(self, what: str) -> "Workload":
        """This workload with `what` (QUANTISED) in fp8: its field set as QUANTISING says (a Refusal where the
        workload cannot take it). The same seeded values are drawn (`make_inputs`), then quantised."""
        name, value = QUANTISING[what]
        return self.replace(**{name: value})

    @property
    def unquantised(self) -> "Workload":
        """The 16-bit workload whose drawn values this one quantises (itself where nothing is quantised)."""
        return self.replace(dtype=self.drawn, kv_dtype=None) if self.quantised else self

    @property
    def queries(self) -> int:
        """Query positions per sequence: q_len, else S."""
        return self.q_len or self.seq_len

    @property
    def lower_right(self) -> bool:
        """A causal decode step: the causal flag with fewer queries than keys, so the mask is aligned to the bottom
        right (the queries are the last positions: `causal_lower_right`), not SDPA's `is_causal` top left. The one
        test: SDPA's call and dispatch, the materialised mask cuDNN and math are given, and the top-left check read it."""
        return self.mask == "flag" and self.causal and self.q_len is not None

    @property
    def offset(self) -> int:
        """The first query's position among the S keys: the queries are the last `queries` positions."""
        return self.seq_len - self.queries

    @property
    def kv_head_count(self) -> int:
        return self.kv_heads or self.heads

    @property
    def groups(self) -> int:
        """Query heads per kv head: 1 for plain multi-head attention."""
        return self.heads // self.kv_head_count

    @property
    def training(self) -> bool:
        return self.passes != "fwd"

    @property
    def shape(self) -> tuple[int, ...]:
        """q's shape (and the output's)."""
        if self.rank == 4:
            return (self.batch, self.heads, self.queries, self.head_dim)
        return (self.batch * self.heads, self.queries, self.head_dim)

    @property
    def kv_shape(self) -> tuple[int, ...]:
        """k's and v's shape: fewer heads with grouped-query attention."""
        if self.rank == 4:
            return (self.batch, self.kv_head_count, self.seq_len, self.head_dim)
        return (self.batch * self.heads, self.seq_len, self.head_dim)

    @property
    def element_bytes(self) -> int:
        return DTYPE_BYTES[self.dtype]

    @property
    def kv_element_bytes(self) -> int:
        """k's and v's: 1 in an fp8 KV cache, else the dtype's."""
        return DTYPE_BYTES["fp8"] if self.kv_dtype == "fp8" else self.element_bytes

    @property
    def q_bytes(self) -> int:
        """q: B·H·Lq·D elements."""
        return self.batch * self.heads * self.queries * self.head_dim * self.element_bytes

    @property
    def output_bytes(self) -> int:
        """The output (and its gradient): q's elements in the drawn dtype (bf16 for fp8 inputs)."""
        return self.batch * self.heads * self.queries * self.head_dim * DTYPE_BYTES[self.drawn]

    @property
    def kv_bytes(self) -> int:
        """k and v together: B·Hkv·S·D elements each (fewer heads with grouped-query attention)."""
        return 2 * self.batch * self.kv_head_count * self.seq_len * self.head_dim * self.kv_element_bytes

    @property
    def quantisation_bytes(self) -> int:
        """What quantised inputs hold beside q, k and v: the drawn values kept for the reference (in the drawn dtype)
        and, while the reference runs, their dequantised copies (fp32); 0 where nothing is quantised."""
        if not self.quantised:
            return 0
        elements = (self.q_bytes // self.element_bytes if self.quantised == "qkv" else 0) + \
            self.kv_bytes // self.kv_element_bytes
        return elements * (DTYPE_BYTES[self.drawn] + 4)

    @property
    def pages(self) -> int:
        """Pages of the KV cache per sequence (0 for a contiguous cache)."""
        return self.seq_len // self.page_size if self.page_size else 0

    @property
    def page_table_bytes(self) -> int:
        """The page table a paged kernel reads: one int32 physical page per logical page and sequence."""
        return 4 * self.batch * self.pages

    @property
    def score_elements(self) -> int:
        """One B·H·Lq×S score matrix's elements."""
        return self.batch * self.heads * self.queries * self.seq_len

    @property
    def headed_kv_elements(self) -> int:
        """K and V as the query heads read them: 2·B·H·S·D elements (a grouped-query kv head once per query head it
        serves: what hand-written attention copies, what a decode step's cost follows)."""
        return 2 * self.batch * self.heads * self.seq_len * self.head_dim

    def scores_bytes(self, element_bytes: int | None = None) -> int:
        """One B·H·Lq×S score matrix, in the inputs' dtype or in `element_bytes`."""
        return self.score_elements * (element_bytes or self.element_bytes)

    def repeated_kv_bytes(self, element_bytes: int | None = None) -> int:
        """K (or V) copied to every query head, as `repeat_interleave` copies it for grouped-query attention:
        B·H·S·D elements, in the inputs' dtype or in `element_bytes`."""
        return self.batch * self.heads * self.seq_len * self.head_dim * (element_bytes or self.element_bytes)

    @property
    def mask_elements(self) -> int:
        """One Lq×S mask (the same for every head and batch)."""
        return self.queries * self.seq_len

    @property
    def pairs(self) -> int:
        """Query–key pairs the mask lets one head attend, counted: query i (at position offset + i) sees every key
        without a causal pattern, keys 0…offset + i with one, and of those only the last W within a window."""
        if not self.causal:
            return self.queries * self.seq_len
        window = self.window if self.mask == "window" else self.seq_len
        first, last = self.offset + 1, self.seq_len          # keys the first and the last query may see
        capped = max(0, last - max(first, window) + 1)         # queries that see more than W keys: W each
        below = self.queries - capped                          # the others see first, first + 1, … keys
        return capped * window + below * first + below * (below - 1) // 2

    # -- bytes: what a call must move, at the least --------------------------------------------------------
    def tensors(self, phase: str, packing: str = "padded", sparse: bool = False) -> list[tuple[str, int]]:
        """The tensors one call of `phase` must read or write, each once at the least, with their bytes: a forward reads
        q, K, V (and the mask or bias it is passed) and writes out; a backward reads q, K, V (the mask or bias: it
        recomputes the scores), out and dout and writes dq, dK, dV (the per-row log-sum-exp, B·H·Lq floats, left out);
        a paged cache's page table too; a step is both, in turn. The one bytes model: memory traffic, the L2's working
        set and every note that states bytes read it. The mask a call is passed: the Lq×S bias in the dtype, or the Lq×S
        bool mask of a bool mask and of a window (SDPA has no window argument, naive code reads the mask), except where
        the variant is `sparse` (a window argument, a block mask built from positions: no dense mask to read). Packed
        documents: a padded way's tensors are B×S (and, without the causal flag, its [B, S] key-padding mask); a packed
        way's hold the T real tokens only (and, over one sequence, the [T, T] block-diagonal mask, or for a sparse way
        the BlockMask's tile tables and the [T] document ids in its place)."""
        def of(phase: str) -> list[tuple[str, int]]:
            q, kv = self.q_bytes, self.kv_bytes // 2
            mask = [("bias", self.mask_elements * self.element_bytes)] if self.mask == "bias" else \
                [("mask", self.mask_elements)] if self.mask == "bool" or (self.mask == "window" and not sparse) else []
            if packing != "padded":
                q, kv = (self.tokens * heads * self.head_dim * size
                         for heads, size in ((self.heads, self.element_bytes), (self.kv_head_count,
                                                                                 self.kv_element_bytes)))
                mask = [] if packing != "block" or self.lengths is None else \
                    [("block mask", self.document_block_mask_bytes(phase)), ("document ids", self.document_ids_bytes)] \
                    if sparse else [("mask", self.block_mask_bytes)]
            elif self.lengths is not None and not self.causal:
                mask = [("mask", self.batch * self.seq_len)]
            mask += [("page table", self.page_table_bytes)] if self.page_size else []
            out = q * DTYPE_BYTES[self.drawn] // self.element_bytes
            if phase == "forward":
                return [("q", q), ("K", kv), ("V", kv), *mask, ("out", out)]
            return [("q", q), ("K", kv), ("V", kv), *mask, ("out", out), ("dout", out), ("dq", q), ("dK", kv), ("dV", kv)]
        return of("forward") + of("backward") if phase == "step" else of(phase)

    def moved_bytes(self, phase: str, packing: str = "padded", sparse: bool = False) -> int:
        """Bytes one call of `phase` moves at the least: each of its `tensors` once (a step's forward and backward
        each)."""
        return sum(n for _, n in self.tensors(phase, packing, sparse))

    def outputs(self, phase: str, packing: str = "padded", sparse: bool = False) -> list[tuple[str, int]]:
        """The `tensors` a call of `phase` writes: a forward's out, a backward's dq, dK and dV, a step's both (the rest
        it reads)."""
        if phase == "step":
            return self.outputs("forward", packing, sparse) + self.outputs("backward", packing, sparse)
        return self.tensors(phase, packing, sparse)[-1 if phase == "forward" else -3:]

    def written_bytes(self, phase: str, packing: str = "padded", sparse: bool = False) -> int:
        """The part of `moved_bytes` a call of `phase` writes (its `outputs`)."""
        return sum(n for _, n in self.outputs(phase, packing, sparse))

    def working_set_bytes(self, phase: str, packing: str = "padded", sparse: bool = False) -> int:
        """The distinct `tensors` one call of `phase` touches: what a warm loop may find in L2 from the call before (a
        step's block mask: the backward's, which holds the forward's)."""
        return sum(dict(self.tensors(phase, packing, sparse)).values())

    # -- packed documents: the real pairs, and what padding adds ------------------------------------------
    @property
    def documents(self) -> tuple[int, ...]:
        """Each sequence's length: the packed documents', or B sequences of S."""
        return self.lengths or (self.seq_len,) * self.batch

    @property
    def tokens(self) -> int:
        """The real tokens of the batch: the documents' lengths summed (B·S without packing)."""
        return sum(self.documents)

    def _square_pairs(self, n: int) -> int:
        """Pairs one head attends in a sequence of n queries and n keys, under this workload's causal flag."""
        return n * (n + 1) // 2 if self.causal else n * n

    @property
    def attended_pairs(self) -> int:
        """Query–key pairs one head attends over the whole batch: each document's own (B·pairs without packing)."""
        if self.lengths is None:
            return self.batch * self.pairs
        return sum(self._square_pairs(n) for n in self.lengths)

    @property
    def padded_pairs(self) -> int:
        """The pairs one head computes over the batch padded to B×S: B·pairs (every row as long as the longest)."""
        return self.batch * self.pairs

    @property
    def wasted_pairs(self) -> int:
        """What padding adds per head: Σ (pairs(S) − pairs(Lᵢ)) over the documents; 0 without packing."""
        return self.padded_pairs - self.attended_pairs

    @property
    def block_pairs(self) -> int:
        """The pairs one head's kernel visits over one packed sequence of the T tokens under a dense [T, T] mask, which
        skips no tile: T²."""
        return self.tokens ** 2

    block_mask_bytes = block_pairs  # that [T, T] mask in bool: a byte a pair

    def document_block_mask_bytes(self, phase: str) -> int:
        """What FlexAttention's BlockMask over one sequence of the T tokens holds for `phase`, in place of a [T, T]
        mask: per 128×128 tile a partial and a full block table in int32, n counts and n×n indices (n = T/128 tiles a
        side); the forward reads the key-side tables, a backward the query-side ones too. (Its mask_mod reads the [T]
        document ids besides: `document_ids_bytes`.)"""
        n = -(-self.tokens // 128)
        return (2 if phase == "forward" else 4) * 4 * (n + n * n)

    @property
    def document_ids_bytes(self) -> int:
        """The [T] int64 document id of each token that flex's document mask_mod reads."""
        return 8 * self.tokens

    # -- work: FLOPs by pair and by pass -------------------------------------------------------------------
    def pair_flops(self, pairs: float) -> float:
        """A forward's FLOPs over `pairs` query–key pairs, each head's counted: 4·D a pair (two matmuls, 2 FLOPs a
        multiply-add)."""
        return 4.0 * self.head_dim * pairs

    @property
    def flops(self) -> float:
        """The forward's FLOPs over the attended pairs of every head and batch row: packed documents count their own
        pairs only, whatever a way computes beside them."""
        return self.pair_flops(self.heads * self.attended_pairs)

    @property
    def dense_flops(self) -> float:
        """The forward's FLOPs over every pair (the B·H·Lq×S scores), as a kernel that skips no tile computes them."""
        return self.pair_flops(self.score_elements)

    @property
    def call_passes(self) -> str:
        """The passes one measured call runs: a training call its forward and backward (a backward-only figure is a
        step's calls, timed in part)."""
        return "fwd+bwd" if self.training else "fwd"

    @property
    def pass_flops(self) -> float:
        """The pass's FLOPs by the anchors' model: a backward is BACKWARD_FLOPS forwards."""
        return self.flops * PASS_FLOPS[self.passes]

    # -- inputs ---------------------------------------------------------------------------
    def make_inputs(self) -> "Inputs":
        """Seeded q, k, v (never zeros: zeros hide bugs and run faster), the masks the variants read, built once,
        and for a training pass a seeded gradient of the output."""
        import torch

        drawn = getattr(torch, DTYPES[self.drawn])
        generator = torch.Generator(device=self.device).manual_seed(self.seed)
        q = torch.randn(self.shape, generator=generator, device=self.device, dtype=drawn)
        k, v = (torch.randn(self.kv_shape, generator=generator, device=self.device, dtype=drawn) for _ in range(2))
        allowed, bias = self.allowed(), None
        if self.mask == "bias":  # a distance penalty (ALiBi's slope for one head), −inf where not allowed
            bias = (-self._offsets().abs().to(torch.float32) / self.seq_len).masked_fill(~allowed, float("-inf")) \
                .to(drawn)
        grad_out = torch.randn(self.shape, generator=generator, device=self.device, dtype=drawn) \
            if self.training else None
        if grad_out is not None and self.lengths is not None:  # a padded row's loss is masked out: no gradient
            grad_out.masked_fill_(~self.real_positions()[:, None, :, None], 0)
        table = self._page_table(generator) if self.page_size else None
        drawn_inputs = Inputs(self.unquantised, q, k, v, allowed, bias, grad_out, page_table=table)
        return drawn_inputs.quantised_as(self) if self.quantised else drawn_inputs.paged()

    def real_positions(self) -> "torch.Tensor":
        """[B, S] bool, True where a batch row holds a token of its document (the documents padded at the end)."""
        import torch

        lengths = torch.tensor(self.documents, device=self.device)
        return torch.arange(self.seq_len, device=self.device)[None, :] < lengths[:, None]

    def _offsets(self) -> "torch.Tensor":
        """Each query's position minus each key's: [Lq, S] (the queries are the last Lq of the S positions)."""
        import torch

        queries = torch.arange(self.offset, self.seq_len, device=self.device)
        keys = torch.arange(self.seq_len, device=self.device)
        return queries[:, None] - keys[None, :]

    def allowed(self) -> "torch.Tensor | None":
        """[Lq, S] bool, True where a query may attend a key (what SDPA's attn_mask takes), the one rule every
        variant's mask follows and the page's picture of it draws; None where every query sees every key."""
        import torch

        if not (self.causal or self.mask != "flag"):
            return None
        offset = self._offsets()
        allowed = offset >= 0 if self.causal else torch.ones(self.queries, self.seq_len, dtype=torch.bool,
                                                             device=self.device)
        if self.mask == "window":
            allowed &= offset < self.window
        return allowed

    def _page_table(self, generator: torch.Generator) -> "torch.Tensor":
        """Where a paged cache's pages lie, as a server holds it after sequences came and went: [B, S/P] int32, the
        physical page of each logical page, every sequence's pages at seeded, shuffled places of a pool of B·S/P."""
        import torch

        n = self.batch * self.pages
        return torch.randperm(n, generator=generator, device=self.device).view(self.batch, self.pages) \
            .to(torch.int32)

    def pools(self, k: torch.Tensor, v: torch.Tensor, table: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """k and v in a paged cache's pools of [P, Hkv, D] pages (vLLM's and FlashAttention's layout), each logical
        page where `table` puts it. A kernel that reads it gathers."""
        import torch

        b, kv, n, ps, d = self.batch, self.kv_head_count, self.pages, self.page_size, self.head_dim
        pools = []
        for t in (k, v):
            pool = torch.empty(b * n, ps, kv, d, device=self.device, dtype=t.dtype)
            pool[table.flatten().long()] = t.view(b, kv, n, ps, d).permute(0, 2, 3, 1, 4).reshape(b * n, ps, kv, d)
            pools.append(pool)
        return pools[0], pools[1]


# The fields a request sets (every field but the device, which the source decides, and the seed).
FIELDS = tuple(f for f in dataclasses.fields(Workload) if "spec" in f.metadata)


def spec_of(name: str) -> Spec:
    return next(f.metadata["spec"] for f in FIELDS if f.name == name)


# The named workloads, one table: the app's presets, the recorder's matrix and the tests read them here.
NAMED = {
    "blog": Workload(),                                                             # the blog post's
    "cpu": Workload(batch=1, heads=8, seq_len=512, dtype="fp32", device="cpu"),      # a live CPU's base
    "llama": Workload(batch=4, heads=32, kv_heads=8, seq_len=2048, head_dim=128),    # grouped-query, Llama-style
    "decode": Workload(batch=8, heads=32, kv_heads=8, seq_len=8192, head_dim=128, q_len=1),  # Llama's decode step
}


@dataclass
class Packed:
    """The batch's documents end to end, as the packed ways read them (varlen's layout): the same values as the padded
    [B, H, S, D] tensors' real rows, with what locates each document, built once per workload."""
    q: torch.Tensor                  # [T, H, D]: T tokens in all
    k: torch.Tensor                  # [T, Hkv, D]
    v: torch.Tensor
    grad_out: torch.Tensor | None    # [T, H, D]
    cu_seqlens: torch.Tensor         # [B + 1] int32: where each document starts, then T (varlen, FlashAttention)
    offsets: torch.Tensor            # [B + 1] int64: the same, as nested jagged tensors take them
    document: torch.Tensor           # [T] int64: each token's document (what a block-diagonal mask compares)
    position: torch.Tensor           # [T] int64: each token's position within its document
    max_len: int                     # the longest document (S)

    @classmethod
    def of(cls, x: "Inputs") -> "Packed":
        import torch

        w = x.workload
        real = w.real_positions()                                           # [B, S]
        q, k, v = (t.detach().transpose(1, 2)[real].requires_grad_(t.requires_grad) for t in (x.q, x.k, x.v))
        grad_out = None if x.grad_out is None else x.grad_out.transpose(1, 2)[real]
        lengths = torch.tensor(w.documents, device=w.device)
        offsets = torch.nn.functional.pad(lengths.cumsum(0), (1, 0))
        document = torch.repeat_interleave(torch.arange(w.batch, device=w.device), lengths)
        position = torch.arange(w.tokens, device=w.device) - offsets[document]
        return cls(q, k, v, grad_out, offsets.to(torch.int32), offsets, document, position, w.seq_len)


def quantise(t: "torch.Tensor") -> tuple["torch.Tensor", "torch.Tensor"]:
    """`t` in fp8 (e4m3) per tensor, and its scale: scale = amax(|t|) / FP8_MAX (fp32, 0-d; the smallest normal fp32
    where t is all zeros), t / scale rounded to the nearest e4m3 (clamped to ±FP8_MAX first: a quotient a rounding past
    448 stays finite). t ≈ fp8 · scale: the scale is the descale a kernel multiplies back."""
    import torch

    scale = (t.abs().amax().float() / FP8_MAX).clamp_min(torch.finfo(torch.float32).tiny)
    return (t.float() / scale).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn), scale


@dataclass
class Quantised:
    """Inputs quantised to fp8 per tensor, built once per workload: the drawn values (what the fp64 reference reads),
    the fp8 tensors a kernel is handed and their scales (a kernel's descales), and how long the quantisation took (its
    own figure, never inside a call's time)."""
    drawn: dict[str, "torch.Tensor"]   # "q", "k", "v" as drawn (bf16 for dtype fp8; k and v only for an fp8 cache)
    fp8: dict[str, "torch.Tensor"]     # the same names in float8_e4m3fn
    scales: dict[str, "torch.Tensor"]  # the same names: fp32 0-d scale (amax/448), fp8 · scale ≈ drawn
    ms: float                          # wall time of the quantisation (the device synchronised before and after)

    @classmethod
    def of(cls, w: Workload, q: "torch.Tensor", k: "torch.Tensor", v: "torch.Tensor") -> "Quantised":
        import time

        import torch

        def sync() -> None:  # the device's queue drained (here, not timing's: timing stands above the workload)
            if w.device == "cuda":
                torch.cuda.synchronize()

        drawn = {"q": q, "k": k, "v": v} if w.quantised == "qkv" else {"k": k, "v": v}
        sync()
        t0 = time.perf_counter()
        made = {name: quantise(t) for name, t in drawn.items()}
        sync()
        ms = (time.perf_counter() - t0) * 1000.0
        return cls(drawn, {n: m[0] for n, m in made.items()}, {n: m[1] for n, m in made.items()}, ms)

    def dequantised(self, name: str) -> "torch.Tensor":
        """fp8 · scale in fp32 (an e4m3 value has 4 significant bits and the scale 24: the product rounds at 2^-24
        relative, a millionth of e4m3's own step)."""
        return self.fp8[name].float() * self.scales[name]


@dataclass
class Inputs:
    workload: Workload
    q: torch.Tensor                  # [B, H, Lq, D] or [B*H, Lq, D]
    k: torch.Tensor                  # [B, Hkv, S, D] (Hkv = H without grouped-query attention)
    v: torch.Tensor
    allowed: torch.Tensor | None     # [Lq, S] bool, True where a query may attend a key (SDPA's attn_mask); None: all
    bias: torch.Tensor | None        # [Lq, S] additive bias in the inputs' dtype, −inf where not allowed (mask=bias)
    grad_out: torch.Tensor | None = None  # a training pass's fixed gradient of the output
    k_pages: torch.Tensor | None = None   # a paged cache (page_size): k in a pool of [pages, P, Hkv, D] ...
    v_pages: torch.Tensor | None = None   # ... v likewise ...
    page_table: torch.Tensor | None = None  # ... and [B, S/P] int32: the physical page of each logical page
    quantised: Quantised | None = None    # fp8 inputs: q, k, v (or k and v) above are its fp8 tensors

    @property
    def scale(self) -> float:
        return self.workload.head_dim ** -0.5

    @property
    def hidden(self) -> torch.Tensor | None:
        """[Lq, S] bool, True where attention is forbidden (masked_fill's sense); for a padded batch of documents
        without the causal flag, [B, 1, 1, S] at each row's padding keys; None when nothing is."""
        return self._hidden

    def __post_init__(self):
        w = self.workload
        # A padded batch hides its padding keys: under the causal flag they lie after every real query of their row
        # (right padding), so the flag alone hides them; without it a key-padding mask, built once per batch as its
        # loader builds it. A padded query row's output is computed and never read (its loss is masked out).
        self._padding = w.real_positions()[:, None, None, :] if w.lengths is not None and not w.causal else None
        hidden = self.allowed if self.allowed is not None else self._padding
        self._hidden = None if hidden is None else ~hidden  # built once, like the mask itself
        self._packed: Packed | None = None
        self._prepared: dict[str, object] = {}

    def prepared(self, key: str, make):
        """What a variant's setup made for these inputs (FlashInfer's plan), under `key`: made by `make()` on first
        use and kept with the inputs, so it is freed with them."""
        if key not in self._prepared:
            self._prepared[key] = make()
        return self._prepared[key]

    def is_prepared(self, key: str) -> bool:
        return key in self._prepared

    def packed(self) -> Packed:
        """The documents packed end to end ([T, H, D]), made from q, k and v on first use (the packed ways' inputs;
        leaves of their own in a training pass)."""
        if self._packed is None:
            self._packed = Packed.of(self)
        return self._packed

    @property
    def padding(self) -> torch.Tensor | None:
        """[B, 1, 1, S] bool, True at each row's real keys: the key-padding mask a padded batch of documents passes
        SDPA without the causal flag; None otherwise (the flag hides right padding)."""
        return self._padding

    def as_reference(self, t: torch.Tensor, packing: str) -> torch.Tensor:
        """A variant's output or gradient in the reference's layout: with packed documents [T, H, D] (a padded
        batch's real rows; one packed sequence [1, H, T, D] unfolded), else the workload's own [B, H, S, D]."""
        w = self.workload
        if w.lengths is not None:
            if packing == "padded":
                return t.transpose(1, 2)[w.real_positions()]
            return t[0].transpose(0, 1) if packing == "block" else t
        if packing == "padded":
            return t
        if packing == "block":                                             # [1, H, B·S, D]
            t = t[0].transpose(0, 1)
        return t.reshape(w.batch, w.seq_len, t.shape[-2], w.head_dim).transpose(1, 2)

    def with_grad(self) -> "Inputs":
        """Leaf copies of q, k, v that require grad, for a training pass (the same values: the same reference)."""
        q, k, v = (t.detach().clone().requires_grad_(True) for t in (self.q, self.k, self.v))
        return Inputs(self.workload, q, k, v, self.allowed, self.bias, self.grad_out, quantised=self.quantised)

    def _with(self, values: dict[str, "torch.Tensor"]) -> "Inputs":
        """These inputs with q, k or v replaced by `values` (the same masks; no paged cache, nothing quantised)."""
        q, k, v = (values.get(name, t) for name, t in (("q", self.q), ("k", self.k), ("v", self.v)))
        return Inputs(self.workload, q, k, v, self.allowed, self.bias, self.grad_out)

    def exact(self) -> "Inputs":
        """The inputs as drawn, before any quantisation (the reference's truth): these inputs where none was."""
        return self if self.quantised is None else self._with(self.quantised.drawn)

    def dequantised(self) -> "Inputs":
        """The quantised inputs read back (fp8 · scale, in fp32): what an fp8 kernel that applies its descales
        computes on; q as drawn where only the cache is quantised."""
        qz = self.quantised
        return self._with({name: qz.dequantised(name) for name in qz.fp8})

    def paged(self) -> "Inputs":
        """These inputs with k and v also in the pools of their page table (`Workload.pools`); themselves without
        one."""
        if self.page_table is None or self.k_pages is not None:
            return self
        k_pages, v_pages = self.workload.pools(self.k, self.v, self.page_table)
        return dataclasses.replace(self, k_pages=k_pages, v_pages=v_pages)

    def quantised_as(self, w: Workload) -> "Inputs":
        """These drawn 16-bit inputs quantised as `w` says (`w.unquantised` is their workload): the same values, the
        same masks, gradient and page table, q, k and v (or k and v) in fp8 with their scales, the quantisation
        timed (`Quantised.of`). The one route to fp8 inputs: a workload of dtype or kv_dtype fp8 draws its 16-bit
        values and comes here, and an fp8 twin beside its 16-bit partner quantises the partner's drawn values."""
        assert self.quantised is None and w.unquantised == self.workload, (w, self.workload)
        quantised = Quantised.of(w, self.q, self.k, self.v)
        q, k, v = (quantised.fp8.get(name, t) for name, t in (("q", self.q), ("k", self.k), ("v", self.v)))
        return Inputs(w, q, k, v, self.allowed, self.bias, self.grad_out, page_table=self.page_table,
                      quantised=quantised).paged()

    def descales(self) -> dict[str, "torch.Tensor"]:
        """The fp32 0-d scale of each quantised input by name ("q", "k", "v"): what a kernel multiplies back."""
        return dict(self.quantised.scales) if self.quantised is not None else {}
