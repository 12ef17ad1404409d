"""A decode step in the trace: a few new queries per sequence against a long KV cache (`q_len`). Which kernel each
backend picked for it (a split-KV kernel and its combine, FlexAttention's decoding kernel, or one kernel as for a
prefill) and how many splits its grid shows; query heads packed per kv head; the page table of a paged cache; and
what SDPA's is_causal=True would have given instead of the lower-right mask, computed on the same inputs. The bytes a
call moves and its rate are timing_rules.memory_traffic's, as for every GPU run.

What a kernel's grid means is read from its launcher's source (PyTorch's flash_fwd_launch_template.h, inductor's
flex_decoding.py) and stated only where the grid has that layout; the rest is the trace's.
"""
from __future__ import annotations

from dataclasses import dataclass

from .. import gpu_paths, text
from ..results import Kernel, Note, Quantity, Run
from .facts import (Peers, constant, label, launch_count, main_kernel, measured, note, of_kernel, on_gpu, scaled,
                    share_of, variant)

FLASH = "pytorch_flash::flash_fwd_kernel"
FLASH_SPLIT, FLASH_COMBINE = "pytorch_flash::flash_fwd_splitkv_kernel", "pytorch_flash::flash_fwd_splitkv_combine_kernel"
FLEX_TEMPLATE = "triton_tem_"                                     # inductor's template (flex's attention kernel)
FLEX_AFTER = ("triton_per_", "triton_red_", "triton_poi_")         # its reductions and pointwise kernels


def _split_rule() -> Quantity:
    q = constant(gpu_paths.SPLIT_BELOW, "share", str(gpu_paths.SPLIT_BELOW))
    q.of = "two blocks per SM"
    return q


def _decoding(run: Run) -> bool:
    return run.ok and run.workload.q_len is not None and run.timing is not None


def _index(run: Run, k: Kernel) -> int:
    return next(i for i, x in enumerate(run.kernels) if x is k)


def flex_decodes(w) -> bool:
    """Whether inductor lowers this workload's flex call to its decoding template (flex_decoding.py,
    _use_flex_decoding): under 128 queries, a power-of-two group of query heads (static shapes and a block mask of
    one head, as every flex call here has). Its grid is then (query blocks, B·Hkv, SPLIT_KV) (flex_decoding_grid),
    which a prefill grid (query blocks, B, H) can equal in numbers."""
    return 0 < w.queries < 128 and w.groups & (w.groups - 1) == 0


@dataclass
class DecodePath:
    """How the forward ran a decode step, as the trace shows it."""
    kind: str                     # "split-kv" (PyTorch's flash), "declared split" (`Variant.split_kv`), "flex
                                  # decoding", "flex prefill", "one kernel"
    main: Kernel                  # the kernel that walks the keys
    combine: list[Kernel]         # what merges the splits' partial outputs
    splits_at: str | None = None  # the grid entry that holds the number of splits ("grid[1]"), where it does
    heads_at: str | None = None   # the grid entry that runs over batch × heads ("grid[2]"), where one does
    heads: int | None = None      # the heads that entry counts per sequence (kv heads when query heads are packed)


def decode_path(run: Run) -> DecodePath | None:
    """The decode kernels of a GPU run's forward: PyTorch's flash split-KV kernel (grid (query blocks, splits,
    B·h), flash_fwd_launch_template.h) and its combine; flex's Triton template with inductor's reductions after it,
    the decoding kernel when its grid is (query blocks, B·Hkv, splits) (flex_decoding.py, flex_decoding_grid), its
    prefill kernel when (query blocks, B, H); else the forward's longest kernel alone, where it is an attention
    kernel."""
    if not (_decoding(run) and on_gpu(run)):
        return None
    w, forward = run.workload, run.kernels_of("forward")
    declared = _declared_split(run, forward)
    if declared is not None:
        return declared
    split = next((k for k in forward if k.short_name == FLASH_SPLIT), None)
    if split is not None:
        combine = [k for k in forward if k.short_name == FLASH_COMBINE]
        if combine and split.grid and split.grid[2] % w.batch == 0:
            return DecodePath("split-kv", split, combine, "grid[1]", "grid[2]", split.grid[2] // w.batch)
        return DecodePath("split-kv", split, combine)
    template = next((k for k in forward if k.short_name.startswith(FLEX_TEMPLATE)), None)
    if template is not None and template.grid:
        if flex_decodes(w) and template.grid[1] == w.batch * w.kv_head_count:  # whatever merges the splits after it
            after = [k for k in forward[forward.index(template) + 1:] if k.short_name.startswith(FLEX_AFTER)]
            return DecodePath("flex decoding", template, after, "grid[2]", "grid[1]", w.kv_head_count)
        if template.grid[1:] == [w.batch, w.heads]:
            return DecodePath("flex prefill", template, [], heads_at="grid[2]", heads=w.heads)
    k = main_kernel(run, "forward")
    if k is None or k.category not in ("fused attention", "triton"):  # attention by hand (naive, math) is many
        return None                                                   # kernels, none of them one that walks the keys
    if k.short_name == FLASH and k.grid and k.grid[1] == w.batch:  # (query blocks, B, h)
        return DecodePath("one kernel", k, [], heads_at="grid[2]", heads=k.grid[2])
    return DecodePath("one kernel", k, [])


def _declared_split(run: Run, forward: list[Kernel]) -> DecodePath | None:
    """The decode path a variant's own file names (`Variant.split_kv`: pieces of its decode kernel's and its merge
    kernel's names): split when the merge ran, else one kernel; None where it names none or its kernel did not run."""
    v = variant(run)
    if v is None or v.split_kv is None:
        return None
    main_piece, merge_piece = v.split_kv
    main = next((k for k in forward if main_piece in k.name.lower()), None)
    if main is None:
        return None
    merge = [k for k in forward if merge_piece in k.name.lower()]
    return DecodePath("declared split", main, merge) if merge else DecodePath("one kernel", main, [])


def decode_kernels(run: Run, peers: Peers) -> Note | None:
    """Which kernel the backend chose for q_len queries: a split of the keys across blocks (so that a few queries
    still fill the GPU) and a combine, or one kernel that walks every key per (query block, head) tile."""
    path = decode_path(run)
    if path is None:
        return None
    i = _index(run, path.main)
    facts = {"queries": measured(run, "workload.queries", "count"), "keys": measured(run, "workload.seq_len", "count"),
             "time": of_kernel(run, path.main, "us_per_forward", "us")}
    names = {"main": text.kernel(path.main), "who": label(run)}
    evidence = [text.kernel_line(k) + (f" · grid {k.grid}" if k.grid else "") for k in [path.main, *path.combine]]
    if path.splits_at:
        facts["splits"] = measured(run, f"kernels[{i}].{path.splits_at}", "count")
    if path.combine:
        facts["merge"] = share_of(run, path.combine, "forward")
        names["combine"] = ", ".join(dict.fromkeys(text.kernel(k) for k in path.combine))
    if path.kind == "split-kv":
        title = "{who} split the keys: `{main}`" + (" in {splits} splits" if path.splits_at else "")
        facts["fill"] = _split_rule()
        body = ("Against {keys} keys, q_len {queries} gives too few (batch, head, query block) tiles to fill {fill}, "
                "so PyTorch's flash (num_splits_heuristic) splits each head's keys into fp32 partial outputs"
                + ("; the combine merges them: {merge}." if path.combine else "."))
        weight = 0.3
    elif path.kind == "declared split":
        title = "{who} split the keys: `{main}`, then `{combine}` merges them"
        body = variant(run).words["split"] + "; the merge takes {merge}."
        weight = 0.3
    elif path.kind == "flex decoding":
        split = facts["splits"].value > 1
        title = "flex took its decoding kernel `{main}`: " + ("{splits} key splits, then a combine" if split else
                                                              "no split of the keys")
        body = ("Under 128 queries FlexAttention lowers to its decoding template (flex_decoding.py): a block per "
                "(batch, kv head) and key split; the grid holds {splits} (SPLIT_KV = 2·⌊SMs ÷ B·Hkv⌋, at least 1)")
        if path.combine:
            names["after"] = text.plural(len(path.combine), "kernel")
            body += ("; inductor's {after} after it merge them: {merge}." if split else
                     "; inductor's {after} after it take {merge}.")
        else:
            body += "."
        weight = 0.3
    elif path.kind == "flex prefill":
        facts["group"] = measured(run, "workload.groups", "count")
        title = "flex ran its prefill kernel `{main}` for q_len {queries}, one block per (query block, head)"
        body = ("Its decoding kernel needs fewer than 128 queries, a power-of-two group of query heads (here {group}) "
                "and a block mask of one head (flex_decoding.py, _use_flex_decoding); without it each head's block "
                "walks all {keys} keys alone.")
        weight = 0.3
    else:
        # one kernel walks the keys; the call may launch others beside it (flex's pointwise kernels, cuDNN's mask
        # building), which the title must not deny: "one attention kernel" then, and what the rest take
        others = [k for k in run.kernels_of(path.main.phase) if k is not path.main]
        title = "{who} ran one " + ("attention " if others else "") + "kernel for q_len {queries}: `{main}` ({time} " \
            "per " + path.main.phase + ")"
        # what the trace alone cannot tell is not said: whether this kernel splits the keys (cuDNN's sm80 decode
        # kernel is followed by cudnn::fusion::lean_reduction_kernel, one block per head and sequence)
        body = "One kernel covers all {keys} keys; whether it splits them across blocks, the trace does not show."
        after = [k for k in run.kernels_of(path.main.phase)[run.kernels_of(path.main.phase).index(path.main) + 1:]
                 if "reduction" in k.name.lower()]
        if after:
            facts["reduce"] = share_of(run, after, path.main.phase)
            names["reduction"] = text.kernel(after[0])
            body += " After it runs `{reduction}` ({reduce})."
        if others:
            facts["others"] = launch_count(run, path.main.phase)
            facts["others"] = Quantity(facts["others"].value - path.main.calls_per_forward, "count",
                                       f"diff({facts['others'].source}, run.kernels[{i}].calls_per_forward)")
            facts["rest"] = share_of(run, others, path.main.phase)
        if path.heads_at and path.main.short_name == FLASH:
            facts["blocks"] = constant(float(path.main.grid[0] * path.main.grid[1] * path.main.grid[2]), "count",
                                       f"product(product(run.kernels[{i}].grid[0], run.kernels[{i}].grid[1]), "
                                       f"run.kernels[{i}].grid[2])")
            facts["fill"] = _split_rule()
            body = ("No split of the keys: its grid has {blocks} (query block, batch, head) tiles, enough for PyTorch's "
                    "flash to run its prefill kernel (flash_api.cpp splits only when they fill under {fill}); each "
                    "walks all {keys} keys.")
        elif (v := variant(run)) and run.environment.sm in v.no_split_kv_on:
            body = (f"{label(run)} has no split-KV on {run.environment.sm} ({v.no_split_kv_on[run.environment.sm]}): "
                    "each (query block, kv head) tile walks all {keys} keys, with no combine.")
        if others:
            body += " Beside it the call launches {others} other " + \
                ("kernel" if facts["others"].value == 1 else "kernels") + ", {rest}."
        weight = 0.15
    return note("decode_kernels", "guess", title, body, weight=weight, facts=facts, names=names,
                kernels=[path.main, *path.combine], evidence=evidence)


def gqa_packing(run: Run, peers: Peers) -> Note | None:
    """With fewer kv heads, a decode kernel can put a kv head's query heads in one tile, so its k and v are read once
    for all of them: the grid then runs over B·Hkv, not B·H. PyTorch's flash does it for one query
    (seqlenq_ngroups_swapped, flash_api.cpp); flex's decoding kernel always (its GQA query view)."""
    path = decode_path(run)
    w = run.workload
    if path is None or w.groups == 1 or path.heads_at is None or path.heads != w.kv_head_count:
        return None
    i = _index(run, path.main)
    entry = measured(run, f"kernels[{i}].{path.heads_at}", "count")
    facts = {"grid": entry, "groups": measured(run, "workload.groups", "count"),
             "kv": measured(run, "workload.kv_heads", "count"), "heads": measured(run, "workload.heads", "count")}
    how = ("flash swaps a group's query heads into the query rows when there is one query (seqlenq_ngroups_swapped, "
           "flash_api.cpp)" if path.main.short_name.startswith("pytorch_flash") else
           "flex's decoding kernel views q as [B, Hkv, group, Lq, D] (flex_decoding.py)")
    return note("gqa_packing", "guess", "{who} packed each kv head's {groups} query heads into one tile",
                f"Its grid runs over {{grid}} (batch, head) pairs: B × {{kv}} kv heads, not B × {{heads}} query heads: "
                f"{how}, so each "
                "kv head's k and v are read once for its whole group.",
                weight=0.1, facts=facts, names={"who": label(run)}, kernels=[path.main],
                evidence=[text.kernel_line(path.main) + f" · grid {path.main.grid}"])


def paged_cache(run: Run, peers: Peers) -> Note | None:
    """A paged cache: the kernel finds each page of a sequence in a pool through a table, as a server's cache
    fragments; here the pages lie shuffled, so every tile's keys are gathered."""
    w = run.workload
    if not (run.ok and w.page_size):
        return None
    facts = {"pages": measured(run, "workload.pages", "count"), "size": measured(run, "workload.page_size", "count"),
             "table": measured(run, "workload.page_table_bytes", "bytes"),
             "pool": scaled(measured(run, "workload.pages", "count"), w.batch, "count")}
    v = variant(run)
    how = (v.words.get("paged") if v else None) or "the kernel reads the table"
    pages, pool = ("page" if w.pages == 1 else "pages"), ("page" if w.pages * w.batch == 1 else "pages")
    return note("paged_cache", "guess",
                f"k and v through a page table: {{pages}} {pages} of {{size}} tokens a sequence",
                f"The pool holds {{pool}} {pool} in shuffled order; "
                + how
                + " ({table} of int32 page numbers). The same workload with page_size empty shows what paging costs.",
                weight=0.2, facts=facts)


def causal_alignment(run: Run, peers: Peers) -> Note | None:
    """SDPA's is_causal=True aligns the mask to the top left: with fewer queries than keys query i sees keys 0…i,
    not the keys up to its own position. The run passes causal_lower_right(Lq, S) instead; the measurement computed
    the flag's output too, once, on the same inputs (Accuracy.top_left_*)."""
    a = run.accuracy
    if not run.ok or a is None or (a.top_left_max_abs_error is None and a.top_left_refused is None):
        return None
    facts = {"queries": measured(run, "workload.queries", "count"), "keys": measured(run, "workload.seq_len", "count")}
    if a.top_left_refused is not None:
        return note("causal_alignment", "guess",
                    "is_causal=True is refused for this step: q_len {queries} against {keys} keys",
                    "PyTorch: “{why}”. This run passes causal_lower_right(Lq, S), the mask of queries that are the last "
                    "positions.", weight=0.2, facts=facts, names={"why": text.clip(a.top_left_refused, 160)})
    facts |= {"wrong": measured(run, "accuracy.top_left_max_abs_error", "error"),
              "right": measured(run, "accuracy.max_abs_error", "error")}
    return note("causal_alignment", "guess", "With is_causal=True this decode step would be off by {wrong}",
                "SDPA aligns is_causal to the top left: the last query would see the first {queries} of {keys} keys. "
                "With causal_lower_right(Lq, S) the output is {right} from fp64; the flag's, computed once on the "
                "same inputs, {wrong}.",
                weight=0.45, facts=facts)
