"""The guess against the trace: where the kernels, their arithmetic, memory or occupancy differ from what
reading the code suggests, and why. Each rule reads one run (and, for a ratio, a peer of the same workload)
and returns a `Note` or None; every sentence is built from what this run's trace shows, and every share names the
phase it is of (`share_of`). The time figures (host against GPU, the first call) are `timing_rules`'; the kernels
nobody guessed go in the `ledger`.
"""
from __future__ import annotations

from .. import dispatch, text
from ..results import Note, Run
from ..workload import QUANTISED
from .facts import (ARCH, KINETO_SHARED_PER_BLOCK, NEGLIGIBLE, Peers, constant, difference, fused, guess,
                    host_op, instruction, kernels_in, label, launch_count, launch_share, launches, main_kernel,
                    measured, note, of_kernel, of_launch, occupancy, on_gpu, ran, ratio, scores_bytes, share_of,
                    sixteen_bit, square_scores, total, variant)

PYTORCH = "https://github.com/pytorch/pytorch/blob/main/aten/src/ATen/native"


# -- copies and workspaces nobody wrote -------------------------------------------------------------
def hidden_copy(run: Run, peers: Peers) -> Note | None:
    """Out-of-place masked_fill must leave its input untouched, so the forward clones the S×S scores first (the
    forward's own copy: a backward's masked_fill of the gradient is its own, said apart)."""
    if not run.ok or host_op(run, "aten::masked_fill", "forward") is None \
            or host_op(run, "aten::clone", "forward") is None or not square_scores(run):
        return None
    # the copies masked_fill made (a CPU row is an op: its calls under masked_fill, not the K and V copies of a
    # grouped-query repeat_interleave that the same copy_ row holds)
    kinds = ("memcpy",) if on_gpu(run) else ("copy",)
    copies = [(k, launch) for k, launch in launches(run, "aten::masked_fill", phase="forward") if k.category in kinds]
    again = [(k, launch) for k, launch in launches(run, "aten::masked_fill", phase="backward")
             if k.category in kinds and on_gpu(run)]
    if not copies:
        return None
    facts = {"size": measured(run, "workload.scores_bytes()", "bytes"),
             "time": total(of_launch(run, k, launch, "us_per_forward", "us") for k, launch in copies),
             "share": launch_share(run, copies, "forward")}
    what = "a device-to-device Memcpy" if on_gpu(run) else "clone → copy_"
    body = ("`masked_fill` must leave its input untouched, so it first copies the {size} S×S scores "
            f"({what}, {{time}}, {{share}}). `masked_fill_` writes in place: no copy.")
    if again and run.phase != "forward":
        facts |= {"again": total(of_launch(run, k, launch, "us_per_forward", "us") for k, launch in again)}
        body += " The backward's masked_fill of the gradient copies once more ({again})."
    return note("hidden_copy", "guess", "A copy nobody wrote: out-of-place masked_fill clones the scores", body,
                weight=0.2 + facts["share"].value / 2, facts=facts,  # a line the user can change
                kernels=list({k.name: k for k, _ in copies + again}.values()),
                ops=["aten::masked_fill", "aten::clone", "aten::copy_"],
                evidence=[f"{text.kernel(k)} · {text.us(launch.us_per_forward)} · launched by {text.chain(launch.ops)}"
                          for k, launch in copies + again]
                + [text.host_line(h) for h in (host_op(run, "aten::clone", "forward"),
                                               host_op(run, "aten::copy_", "forward")) if h])


def in_place(run: Run, peers: Peers) -> Note | None:
    """`masked_fill_` removes the copy, and so saves time; in a forward it saves no peak memory, which
    `scores * scale` (two S×S matrices alive at once) already reaches."""
    if not run.ok or run.workload.training or host_op(run, "aten::masked_fill_") is None \
            or host_op(run, "aten::masked_fill") or run.peak_extra_bytes is None:
        return None
    facts = {"peak": measured(run, "peak_extra_bytes", "bytes"),
             "matrices": ratio(measured(run, "peak_extra_bytes", "bytes"),
                               measured(run, "workload.scores_bytes()", "bytes"))}
    if not 1.9 <= facts["matrices"].value <= 2.3:
        return None
    # the same computation out of place, where the comparison has it: its trace clones the scores
    naive = next((p for p in peers.values() if host_op(p, "aten::masked_fill") and host_op(p, "aten::clone")), None)
    time_clause, weight = "", 0.1
    if naive and naive.gpu_ms and run.gpu_ms and naive.peak_extra_bytes is not None:
        who = f"peers[{naive.variant}]"
        naive_ms = measured(naive, "timing.median_ms", "ms", who)
        saved = ratio(difference(naive_ms, measured(run, "timing.median_ms", "ms")), naive_ms, "share")
        saved.of = "the forward's time"
        facts |= {"saved": saved, "naive_peak": measured(naive, "peak_extra_bytes", "bytes", who)}
        time_clause = " It saves {saved} (the copy); out of place the peak is {naive_peak} too."
        weight = 0.25 + facts["saved"].value / 2  # the pair's lesson, and the guess's mistake
    return note("in_place", "guess", "In place saves time, not peak memory",
                "The guess said in place only saves memory. The peak, {peak} ({matrices} one S×S matrix), comes "
                "at `softmax(scores) @ v`: the scores, their softmax and the output, after the fill." + time_clause,
                weight=weight, facts=facts, ops=["aten::masked_fill_", "aten::mul"],
                evidence=[text.host_line(host_op(run, "aten::masked_fill_"))])


def library_memsets(run: Run, peers: Peers) -> Note | None:
    """cuBLAS and cuDNN clear a workspace with cudaMemsetAsync inside their op: Memsets the code never asked for."""
    memsets = kernels_in(run, "memset", phase=run.phase)
    if not on_gpu(run) or not memsets:
        return None
    owners = sorted({launch.ops[-1] for k in memsets for launch in (k.launched_by or []) if launch.ops})
    library = " and ".join(sorted({"cuDNN" if "cudnn" in o else "cuBLAS" if o in ("aten::bmm", "aten::mm")
                                   else "library" for o in owners}))
    facts = {"count": total(of_kernel(run, k, "calls_per_forward", "count") for k in memsets),
             "time": total(of_kernel(run, k, "us_per_forward", "us") for k in memsets)}
    n = facts["count"].value
    inside = " and ".join(f"`{text.op(o)}`" for o in owners) or "the library call"
    return note("library_memsets", "guess",
                f"{{count}} Memset{'s' if n != 1 else ''} per {run.phase} from inside {inside}",
                f"No line of code asks for {'it' if n == 1 else 'them'}: inside {inside}, before its kernel, the "
                f"{library} call issues a cudaMemsetAsync ({{time}} in all). The profiler lists Memsets with the "
                "kernels, so the count is {count} above the ops written.",
                weight=min(sum(k.share for k in memsets), NEGLIGIBLE), facts=facts, kernels=memsets, ops=owners,
                evidence=[f"{text.kernel_line(k)} · launched by {text.chain(launch.ops)}"
                          for k in memsets for launch in (k.launched_by or [])])


INDEX_LIMIT = 2**31 - 1  # the byte offset past which TensorIterator splits an elementwise op


def _chain_calls(run: Run, k, launch) -> float:
    """The calls of a launch chain's op below any attention op (the fewest of its ops': `repeat_interleave → clone →
    copy_` runs once per repeat_interleave, however many other copy_ calls the run makes)."""
    below = launch.ops[max((i + 1 for i, o in enumerate(launch.ops)
                            if o in dispatch.SDPA_BACKEND_OPS or o == "aten::scaled_dot_product_attention"),
                           default=0):]
    calls = [h.calls_per_forward for o in below if (h := host_op(run, o, k.phase))]
    return min(calls, default=0)


def split_launches(run: Run, peers: Peers) -> Note | None:
    """An elementwise op whose operands reach byte offsets past 2³¹−1 runs as several launches: PyTorch's
    TensorIterator checks `can_use_32bit_indexing` on byte offsets (and element count) and splits otherwise. Said
    only of the tensors the workload's shapes put past that: the scores of an unfused call, the copies of K and V at
    every query head that `repeat_interleave` makes for grouped-query attention (math's in fp32, as it computes);
    a library's own kernels launched twice (cuDNN's head reduction, dK's and dV's) are `fused_backward`'s."""
    if not on_gpu(run) or not square_scores(run):  # its sizes are of B×S tensors
        return None
    element = 4 if ran(run) == "math" else run.workload.element_bytes  # math computes in fp32
    dtype = "fp32" if element == 4 else run.workload.dtype
    big = {}
    if not fused(run):
        big["scores"] = (measured(run, f"workload.scores_bytes({element})", "bytes"), f"the {dtype} scores are {{scores}}")
    if run.workload.groups > 1 and host_op(run, "aten::repeat_interleave"):
        big["copies"] = (measured(run, f"workload.repeated_kv_bytes({element})", "bytes"),
                         f"the copies of K and V at every query head (`repeat_interleave`) are {{copies}} each in "
                         f"{dtype}")
    big = {name: said for name, said in big.items() if said[0].value > INDEX_LIMIT}
    split = []  # (kernel, launch, calls of the op that made it, in the kernel's phase)
    for k, launch in launches(run, phase=run.phase):
        calls = _chain_calls(run, k, launch)
        same = sum(x.calls_per_forward for x in k.launched_by if x.ops == launch.ops)
        if calls and k.category in ("elementwise", "copy", "reduction") and round(same / calls, 2) > 1:
            split.append((k, launch, calls))
    if not split or not big:
        return None
    k, launch, calls = max(split, key=lambda s: s[1].us_per_forward)
    facts = {"launches": of_launch(run, k, launch, "calls_per_forward", "count"),
             "calls": constant(calls, "count", repr(calls))} | {name: said[0] for name, said in big.items()}
    extra_launches = sum(l_.calls_per_forward - c for _, l_, c in split)
    tensors = " and ".join(said for _, said in big.values())
    return note("split_launches", "guess", "More launches than ops: past 32-bit indexing",
                text.as_sentence(tensors + ": past 2³¹−1 bytes") + " PyTorch's elementwise kernels then split the "
                "work, one launch per piece: {op} runs {launches} launches for {calls} calls. Same work, more "
                "kernels; {n} split like this.",
                weight=extra_launches / max(run.kernels_per_forward or 1, 1) * 0.5, facts=facts,
                names={"op": f"`{text.chain(launch.ops[-3:])}`",
                       "n": text.plural(len({l_.ops[-1] for _, l_, _ in split}), "op")},
                kernels=[x for x, _, _ in split], ops=[l_.ops[-1] for _, l_, _ in split],
                evidence=[f"{text.kernel(x)}: {text.count(l_.calls_per_forward)} launches for "
                          f"{text.plural(c, 'call')} of {text.chain(l_.ops)} ({x.phase})" for x, l_, c in split],
                links=[f"{PYTORCH}/../TensorIterator.cpp (TensorIteratorBase::can_use_32bit_indexing)"])


# -- arithmetic ---------------------------------------------------------------------------------
def fp32_gemms(run: Run, peers: Peers) -> Note | None:
    """GEMMs on FP32 CUDA cores (FFMA): the math backend's upcast of 16-bit inputs, or fp32 inputs with TF32 off.
    The dtype comes from the inputs and the op; the kernel's name only confirms the instruction family."""
    gemms = [k for k in kernels_in(run, "gemm", phase=run.phase) if instruction(k) == "ffma"]
    if not on_gpu(run) or not gemms:
        return None
    upcast, _ = _math_casts(run) if run.phase != "backward" else ([], [])  # the casts are the forward's
    facts = {"gemm": total(of_kernel(run, k, "us_per_forward", "us") for k in gemms),
             "share": share_of(run, gemms, run.phase)}
    if sixteen_bit(run) and ran(run) == "math":
        if upcast:
            facts["upcast"] = total(of_launch(run, k, launch, "us_per_forward", "us") for k, launch in upcast)
        why = ("SDPA's math path casts {dtype} q, k, v up to fp32" + (" ({upcast} per forward)" if upcast else "")
               + ", so cuBLAS runs fp32 GEMMs on CUDA cores (FFMA): {gemm}, {share}. "
               "`allow_fp16_bf16_reduction_math_sdp(True)` keeps them {dtype}.")
    elif not sixteen_bit(run):
        why = ("fp32 inputs with TF32 off (PyTorch's default) make cuBLAS run exact fp32 GEMMs on CUDA cores "
               "(FFMA): {gemm}, {share}. FP32 throughput is the limit; TF32 or 16-bit inputs bring in the tensor "
               "cores.")
    else:
        return None
    return note("fp32_gemms", "guess", "The GEMMs run in fp32 on CUDA cores, not on tensor cores", why,
                weight=facts["share"].value, facts=facts, names={"dtype": run.workload.dtype},
                kernels=gemms + [k for k, _ in upcast], ops=["aten::bmm"] + (["aten::to"] if upcast else []),
                evidence=[f"{text.kernel_line(k)} · name says {instruction(k)}" for k in gemms]
                + [f"{text.kernel_line(k)} · launched by {text.chain(launch.ops)}" for k, launch in upcast])


# -- the math path ---------------------------------------------------------------------------------
def _math_kernels(run: Run, under: str, skip: str | None = None):
    """The forward's (kernel, launch) pairs launched inside `under` on the math path, without those also inside
    `skip`."""
    return [(k, launch) for k, launch in launches(run, under, phase="forward")
            if "aten::_scaled_dot_product_attention_math" in launch.ops and (skip is None or skip not in launch.ops)]


def _launch_time(run: Run, pairs):
    return total(of_launch(run, k, launch, "us_per_forward", "us") for k, launch in pairs)


def math_mask(run: Run, peers: Peers) -> Note | None:
    """The causal mask math adds to the scores (`add_`), built on every call. Given is_causal the math path builds
    it itself: an S×S bool mask (ones, tril), turned into a −inf/0 float one (a `where`). A decode step passes
    `causal_lower_right` instead, with is_causal=False: that bias materialises the Lq×S bool mask (ones → fill,
    tril) before SDPA, and SDPA converts it (where) before calling math; the trace shows which, by whether those
    launches sit inside the math op. Given an explicit mask math builds none (mask_rules says what it does)."""
    w = run.workload
    if not on_gpu(run) or not (w.causal and w.mask == "flag"):
        return None
    add = _math_kernels(run, "aten::add_")
    if not add:
        return None
    inside = _math_kernels(run, "aten::tril") + _math_kernels(run, "aten::ones") \
        + [(k, launch) for k, launch in _math_kernels(run, "aten::where", skip="aten::_safe_softmax")]
    outside = [(k, launch) for k, launch in launches(run, phase="forward")
               if "aten::_scaled_dot_product_attention_math" not in launch.ops
               and ({"aten::tril", "aten::ones"} & set(launch.ops)
                    or {"aten::scaled_dot_product_attention", "aten::where"} <= set(launch.ops))]
    build = inside or outside
    if not build:
        return None
    facts = {"build": _launch_time(run, build), "add": _launch_time(run, add),
             "share": launch_share(run, build + add, "forward")}
    if inside:
        title = "Math rebuilds the causal mask every call and adds it"
        body = ("Given is_causal, the math path makes an S×S bool mask each call, turns it into a −inf/0 float "
                "mask ({build}) and adds it to the scores with `add_` ({add}): {share}. The naive variants build "
                "their mask once and fill with it.")
    else:
        materialise = [(k, launch) for k, launch in outside if "aten::where" not in launch.ops]
        facts |= {"materialise": _launch_time(run, materialise),
                  "convert": _launch_time(run, [p for p in outside if p not in materialise])}
        title = "The lower-right causal mask is built every call, outside math, and added"
        body = ("`causal_lower_right` passes SDPA a materialised Lq×S bool mask with is_causal=False: it is built "
                "before the math op (ones → fill, tril: {materialise}), SDPA turns it into a −inf/0 float mask "
                "(where: {convert}) and math adds it to the scores with `add_` ({add}): {share}.")
    return note("math_mask", "guess", title, body,
                weight=facts["share"].value, facts=facts, kernels=[k for k, _ in build + add],
                ops=["aten::ones", "aten::tril", "aten::where", "aten::add_"],
                evidence=[f"{text.kernel(k)} · {text.us(launch.us_per_forward)} · launched by {text.chain(launch.ops)}"
                          for k, launch in build + add])


def math_guard(run: Run, peers: Peers) -> Note | None:
    """`_safe_softmax` returns 0, not NaN, for fully masked rows: an isneginf, an `all` reduction and a `where`
    over the S×S scores after the softmax."""
    guard = [(k, launch) for k, launch in launches(run, "aten::_safe_softmax", phase="forward")
             if "aten::_softmax" not in launch.ops]
    if not on_gpu(run) or not guard:
        return None
    facts = {"guard": _launch_time(run, guard), "share": launch_share(run, guard, "forward")}
    where = [(k, launch) for k, launch in guard if launch.ops[-1] == "aten::where"]
    if where:
        facts["where"] = _launch_time(run, where)
    return note("math_guard", "guess", "The softmax guard costs {share}",
                "Math calls `_safe_softmax`: after the softmax it finds rows that are all −inf (isneginf, then "
                "`all`) and zeroes them with a `where`" + (" ({where})" if where else "") + ". Those passes over "
                "the S×S scores take {guard}; naive softmax and the fused kernels skip them.",
                weight=facts["share"].value, facts=facts, kernels=[k for k, _ in guard],
                ops=["aten::_safe_softmax", "aten::isneginf", "aten::all", "aten::where"],
                evidence=[f"{text.kernel(k)} · {text.us(launch.us_per_forward)} · launched by {text.chain(launch.ops)}"
                          for k, launch in guard])


def _math_casts(run: Run) -> tuple[list, list]:
    """The math path's dtype casts in the forward (`aten::to` called by the math op itself): (up to fp32 before
    the first GEMM, back to the input dtype after it), as (kernel, launch) pairs."""
    forward = run.kernels_of("forward")
    gemms = [i for i, k in enumerate(forward) if k.category == "gemm"]
    if ran(run) != "math" or not sixteen_bit(run) or not gemms:
        return [], []
    casts = [(k, launch) for k, launch in _math_kernels(run, "aten::to")
             if launch.ops[launch.ops.index("aten::_scaled_dot_product_attention_math") + 1] == "aten::to"]
    before = [(k, launch) for k, launch in casts if forward.index(k) < gemms[0]]
    return before, [c for c in casts if c not in before]


def math_cast_back(run: Run, peers: Peers) -> Note | None:
    """Math returns (output, attention weights) cast back to the input dtype; SDPA keeps only the output, so the
    S×S weights are cast and thrown away."""
    _, casts = _math_casts(run)
    if not on_gpu(run) or not casts:
        return None
    facts = {"time": _launch_time(run, casts), "share": launch_share(run, casts, "forward")}
    return note("math_cast_back", "guess", "Math casts the S×S weights back to {dtype}, then drops them",
                "The math op returns the output and the attention weights, both cast from fp32 back to {dtype}; "
                "SDPA keeps only the output. The casts take {time} ({share}), most of it on the S×S weights.",
                weight=facts["share"].value, facts=facts, names={"dtype": run.workload.dtype},
                kernels=[k for k, _ in casts], ops=["aten::to", "aten::_to_copy"],
                evidence=[text.kernel_line(k) + f" · launched by {text.chain(launch.ops)}" for k, launch in casts],
                links=[f"{PYTORCH}/transformers/attention.cpp (_scaled_dot_product_attention_math)"])


def softmax_kernel(run: Run, peers: Peers) -> Note | None:
    """Long rows leave the one-warp-per-row softmax for a block-per-row kernel; when softmax dominates, say so."""
    kernels = [k for k in kernels_in(run, "softmax", phase="forward") if k.short_name.startswith("cunn_SoftMax")]
    if not on_gpu(run) or not kernels or max(k.share for k in kernels) < 0.2 or not square_scores(run):
        return None
    k = max(kernels, key=lambda x: x.share)
    facts = {"time": of_kernel(run, k, "us_per_forward", "us"), "share": share_of(run, [k], "forward"),
             "row": measured(run, "workload.seq_len", "count")}
    return note("softmax_kernel", "guess", "Softmax is {share} at rows of {row}",
                "Rows of {row} scores are too long for PyTorch's one-warp-per-row softmax (`softmax_warp_forward`), "
                "so it runs {kernel}, one block per row: {time}. It reads and writes the whole S×S matrix, which "
                "the fused kernels never do.",
                weight=facts["share"].value, facts=facts, names={"kernel": text.kernel(k)}, kernels=[k],
                ops=["aten::_softmax"], evidence=[text.kernel_line(k)],
                links=[f"{PYTORCH}/cuda/SoftMax.cu (host_softmax)"])


def flex_mask_per_call(run: Run, peers: Peers) -> Note | None:
    """flex_attention with block_mask=None makes a full block mask inside every call: extra Triton kernels."""
    extra = [k for k in kernels_in(run, "triton", phase="forward")
             if k.short_name.startswith(("triton_poi_fused_ones", "triton_poi_fused_zeros"))]
    v = variant(run)
    if not on_gpu(run) or not (v and v.compiled) or not extra:
        return None
    facts = {"kernels": launch_count(run, "forward"),
             "time": total(of_kernel(run, k, "us_per_forward", "us") for k in extra)}
    g = guess(run)
    guessed = sum(e.phase == "forward" for e in g.kernels) if g else 1
    return note("flex_mask_per_call", "guess",
                f"{{kernels}} kernels per forward, not {guessed}: a block mask built on every call",
                "Not causal, this variant passes `block_mask=None`, and flex_attention then makes a full block mask "
                "inside every call; compiled, that is {n} small Triton kernels ({time}). A mask made once with "
                "`create_block_mask` and passed in removes them.",
                weight=0.15, facts=facts, names={"n": str(len(extra))}, kernels=extra,
                evidence=[text.kernel_line(k) for k in kernels_in(run, "triton", phase="forward")])


# -- occupancy ---------------------------------------------------------------------------------------
def _limits(run: Run):
    return ARCH.get(run.environment.sm or "")


def _occupancy_facts(run: Run, k) -> dict:
    sm = run.environment.sm
    ref = f"run.kernels[{run.kernels.index(k)}]"
    occ = occupancy(k, ARCH[sm])
    return {"real": constant(100 * occ.fraction, "pct", f"occupancy_pct({ref}, arch[{sm}])"),
            "blocks": constant(occ.blocks, "count", f"occupancy_blocks({ref}, arch[{sm}])"),
            "registers": of_kernel(run, k, "registers_per_thread", "count"),
            "smem": of_kernel(run, k, "shared_memory_bytes", "bytes")}


def occupancy_by_design(run: Run, peers: Peers) -> Note | None:
    """A fused attention kernel keeps its tiles in registers and shared memory, so few blocks fit on an SM."""
    limits = _limits(run)
    low = [k for k in kernels_in(run, "fused attention", "triton", phase=run.phase)
           if limits and occupancy(k, limits) and occupancy(k, limits).fraction < 0.5 and k.share > 0.5]
    if not on_gpu(run) or not low:
        return None
    k = low[0]
    occ = occupancy(k, limits)
    facts = _occupancy_facts(run, k) | {"share": share_of(run, [k], k.phase)}
    g = guess(run)
    expected = "The guess expected high occupancy. " if g and g.occupancy == "high" else ""
    return note("occupancy_by_design", "guess", "{real} occupancy for {kernel}: by design",
                expected + "With {registers} registers a thread and {smem} of shared memory a block, {blocks} "
                f"{'blocks fit' if occ.blocks != 1 else 'block fits'} on an {run.environment.sm} SM (limited by "
                f"{occ.limiter}). A fused kernel keeps its tiles on chip and hides latency with asynchronous "
                "copies, not more warps.",
                weight=0.15 if expected else 0.05, facts=facts, names={"kernel": text.kernel(k, 40)},
                kernels=[k], evidence=[text.kernel_line(k)])


def occupancy_not_zero(run: Run, peers: Peers) -> Note | None:
    """Kineto estimates occupancy assuming 48 KiB of shared memory per block, so a kernel that opts in to more
    reads 0%. The real figure follows from its registers, block and shared memory on this device."""
    limits = _limits(run)
    zeros = [k for k in run.kernels_of() if k.occupancy_pct == 0
             and (k.shared_memory_bytes or 0) > KINETO_SHARED_PER_BLOCK]
    if not on_gpu(run) or not zeros or not limits:
        return None
    k = max(zeros, key=lambda x: x.us_per_forward)
    facts = _occupancy_facts(run, k) | {"kineto": constant(KINETO_SHARED_PER_BLOCK, "bytes", "kineto_shared_per_block"),
                                        "shown": of_kernel(run, k, "occupancy_pct", "pct")}
    api = k.launch_api or "its launch"
    occ = occupancy(k, limits)
    others = f" ({text.plural(len(zeros) - 1, 'more kernel')} the same)" if len(zeros) > 1 else ""
    return note("occupancy_not_zero", "guess", "Kineto's {shown} occupancy is not real: {kernel} runs at {real}",
                "Kineto assumes {kineto} of shared memory per block; this kernel asks for {smem}, so none fits the "
                "estimate, whatever the launch API ({api}). By its "
                f"{{registers}} registers and shared memory, {{blocks}} {'blocks fit' if occ.blocks != 1 else 'block fits'} per "
                "SM" + others + ".",
                weight=0.1, facts=facts, names={"kernel": text.kernel(k, 40), "api": api},
                kernels=zeros, evidence=[text.kernel_line(z) for z in zeros],
                links=["https://github.com/pytorch/kineto/blob/main/libkineto/src/DeviceProperties.cpp"])


# -- memory ------------------------------------------------------------------------------------------
def scores_in_memory(run: Run, peers: Peers) -> Note | None:
    """Naive and math write the B·H·S×S scores to memory; fused kernels never do. The measured peak of a forward
    tells which (a training step's peak also holds what autograd saves: `saved_for_backward` reads that)."""
    w = run.workload
    if not run.ok or w.training or run.peak_extra_bytes is None or w.scores_bytes() < 2 * w.moved_bytes("forward") \
            or not square_scores(run):
        return None  # with S close to D one score matrix is no bigger than q, k, v: the peak cannot tell
    facts = {"peak": measured(run, "peak_extra_bytes", "bytes"), "scores": scores_bytes(run)}
    facts["matrices"] = ratio(facts["peak"], facts["scores"])
    g = guess(run)
    materialised = facts["matrices"].value >= 0.9
    fused_op = fused(run)
    wrong = g is not None and g.materialises_scores != (materialised and not fused_op)
    if materialised and fused_op and run.environment.device == "cpu":
        threads = run.environment.cpu_threads
        return note("scores_in_memory", "guess", "Peak above one S×S matrix, from per-thread blocks ({peak})",
                    "The fused CPU kernel never writes the scores, but it gives each of its {threads} threads fp32 "
                    "query × key blocks; with a short sequence those add up to {matrices} one S×S matrix. They grow "
                    "with threads and block size, not with S².",
                    weight=0.2, facts=facts, names={"threads": str(threads or "")})
    if not materialised:
        # in inference only flash writes a log-sum-exp; efficient and cuDNN skip it (should_compute_logsumexp)
        lse = " and a B·H·S log-sum-exp" if ran(run) == "flash" and run.environment.device == "cuda" else ""
        facts["matrices"].unit = "share"
        facts["matrices"].of = "one S×S matrix"
        return note("scores_in_memory", "guess",
                    ("Guess was wrong: n" if wrong else "N") + "o S×S matrix in memory ({peak} peak)",
                    "The fused kernel computes softmax(q·kᵀ)·v tile by tile on chip and writes only the output"
                    + lse + ": {peak} at peak, {matrices} ({scores}). Memory grows with S, not S².",
                    weight=0.8 if wrong else 0.1, facts=facts)
    alive = ("math keeps several S×S tensors alive at once" + (", in fp32" if sixteen_bit(run) else "")) \
        if ran(run) == "math" else "two S×S matrices are alive at once (the scores and their scaled copy, then " \
        "softmax's input and output)"
    return note("scores_in_memory", "guess",
                ("Guess was wrong: " if wrong else "") + "S×S in memory: peak {matrices} one score matrix",
                "One S×S score matrix is {scores}; the peak is {peak}: " + alive + ". Memory grows with S², which "
                "limits the sequence length" + (", and the guess expected a fused kernel." if wrong else "."),
                weight=0.8 if wrong else 0.3, facts=facts)


# -- fp8: the element type the kernel was built for ---------------------------------------------------------------
FP8_TYPES = ("e4m3", "e5m2")  # an 8-bit float as a demangled template spells it: cutlass::float_e4m3_t (FA3's
                              # kernel, on the H100); FlashInfer's decode kernel names only `Params`, no type


def fp8_kernel(run: Run, peers: Peers) -> Note | None:
    """An fp8 run (q, k and v, or the KV cache, in e4m3): whether the name of the kernel that took most of its GPU time
    carries an 8-bit float type. A template's element type says what the kernel was built to read, not which
    instructions it issues; a name without one (cuDNN's engine names say f16 for bf16 too) proves nothing either way,
    and the note says so."""
    if not on_gpu(run) or run.workload.quantised is None or (main := main_kernel(run, run.phase)) is None:
        return None
    typed = next((t for t in FP8_TYPES if t in main.name.lower()), None)
    asked = QUANTISED[run.workload.quantised]
    facts = {"share": share_of(run, [main], run.phase)}
    names = {"kernel": text.clip(main.short_name, 48), "who": label(run)}
    if typed:
        return note("fp8_kernel", "guess", f"`{{kernel}}` is built for {typed}: the fp8 path ran",
                    f"{{who}} was given {asked}; its main kernel ({{share}}) names {typed} among its template's types: "
                    "it was compiled to read 8-bit floats (the name does not say which instructions it issues).",
                    weight=0.05, facts=facts, names=names, kernels=[main])
    return note("fp8_kernel", "guess", "The trace does not show fp8: `{kernel}` names no 8-bit type",
                f"{{who}} was given {asked}; its main kernel ({{share}}) names neither e4m3 nor e5m2. Some libraries "
                "leave the element type out of their names, so this proves nothing; the error against fp64 is the "
                "check.", weight=0.2, facts=facts, names=names, kernels=[main])
