"""A request is built once, from any door, by one rule: values exactly as specified, refused naming the field, the
value and what is allowed; and it goes back to a link and a command line losslessly."""
from __future__ import annotations

import argparse
import pickle

import pytest
import torch

from attention_variants import get_variant
from profiling.request import KEYS, LIVE, Request, add_workload_arguments, parse_lengths
from profiling.workload import FIELDS, Refusal, Workload

RECORDING = "h200-torch2.11"
BLOG_VALUES = {"source": RECORDING, "a": "sdpa_flash", "b": "sdpa_cudnn", "batch": 8, "heads": 16, "kv_heads": None,
               "seq_len": 1024, "lengths": None, "q_len": None, "page_size": None, "head_dim": 64, "dtype": "bf16", "causal": True,
               "mask": "flag", "window": None, "rank": 4, "passes": "fwd",
               "timing": "warm", "gpus": 1, "cp_rotate": "allgather"}


@pytest.mark.parametrize("field, value, limit_words", [
    ("seq_len", 0, "between 1 and"),
    ("seq_len", -5, "between 1 and"),
    ("seq_len", 10**7, "between 1 and 131072"),
    ("heads", 0, "between 1 and"),
    ("batch", 10**6, "between 1 and 1024"),
    ("head_dim", 4096, "between 1 and 512"),
    ("seq_len", 1.5, "whole number"),
    ("seq_len", 128.0, "whole number"),
    ("heads", True, "whole number"),
    ("heads", "16", "whole number"),
    ("dtype", "e4m3", "fp32, fp16, bf16, fp8"),
    ("dtype", "BF16", "fp32, fp16, bf16, fp8"),
    ("dtype", "bfloat16", "fp32, fp16, bf16, fp8"),
    ("dtype", " fp32 ", "fp32, fp16, bf16, fp8"),
    ("rank", 5, "4, 3"),
    ("rank", "4", "4, 3"),
    ("causal", 1, "true or false"),
])
def test_a_bad_field_names_the_field_the_value_and_what_is_allowed(field, value, limit_words):
    with pytest.raises(Refusal) as caught:
        Workload.cpu_default(**{field: value})
    assert caught.value.field == field and caught.value.kind == "invalid"
    assert repr(value) in str(caught.value) and limit_words in str(caught.value)


def test_a_missing_value_says_it_was_not_given():
    with pytest.raises(Refusal) as caught:
        Request.from_values({**BLOG_VALUES, "heads": None}, "cpu")
    assert str(caught.value) == "heads was not given: must be a whole number between 1 and 1024"


def test_an_unknown_variant_lists_the_known_ones():
    with pytest.raises(Refusal) as caught:
        get_variant("SDPA_FLASH", "a")
    assert caught.value.field == "a" and "sdpa_flash" in str(caught.value)


def test_a_refusal_survives_pickling_with_its_kind_and_amounts():
    error = pickle.loads(pickle.dumps(Refusal("seq_len", 0, "too big", kind="memory", needed=5, available=3)))
    assert (error.field, error.value, error.limit, error.kind, error.needed, error.available) == \
        ("seq_len", 0, "too big", "memory", 5, 3)


def test_flops_and_sizes():
    w = Workload.blog()
    assert w.shape == (8, 16, 1024, 64) and w.replace(rank=3).shape == (128, 1024, 64)
    assert w.flops == 4 * 8 * 16 * 64 * (1024 * 1025 // 2) and w.replace(causal=False).flops == 4 * 8 * 16 * 64 * 1024**2
    assert w.scores_bytes() == 8 * 16 * 1024**2 * 2 and w.scores_bytes(element_bytes=4) == 2 * w.scores_bytes()


def _counted_pairs(w: Workload) -> int:
    """The pairs a head attends, counted on the mask the run uses (an oracle: the workload's closed form is not it)."""
    allowed = w.replace(device="cpu").make_inputs().allowed
    return w.queries * w.seq_len if allowed is None else int(allowed.sum())


@pytest.mark.parametrize("changes", [{}, {"causal": False}, {"mask": "window", "window": 256},
                                     {"mask": "window", "window": 1}, {"mask": "window", "window": 1024},
                                     {"mask": "bool"}, {"mask": "bias"}, {"mask": "bias", "causal": False},
                                     {"q_len": 1}, {"q_len": 16}, {"q_len": 300, "mask": "window", "window": 200},
                                     {"q_len": 8, "mask": "window", "window": 1000}, {"seq_len": 7, "q_len": 3},
                                     {"kv_heads": 4}, {"q_len": 4, "kv_heads": 2, "causal": False}])
def test_the_pairs_and_the_flops_are_the_masks_own_count(changes):
    w = Workload.blog(seq_len=changes.pop("seq_len", 1024), **changes)
    assert w.pairs == _counted_pairs(w)
    assert w.flops == 4 * w.batch * w.heads * w.head_dim * _counted_pairs(w)  # every query head, not kv heads
    assert w.dense_flops == 4 * w.batch * w.heads * w.head_dim * w.queries * w.seq_len


def test_a_decode_step_holds_q_len_queries_against_s_keys_aligned_to_the_end():
    w = Workload.cpu_default(seq_len=16, q_len=4, heads=8, kv_heads=2)
    x = w.make_inputs()
    assert x.q.shape == (1, 8, 4, 64) and x.k.shape == (1, 2, 16, 64) and x.allowed.shape == (4, 16)
    # the last query is the newest token: it sees every key; the first of the four sees keys 0..12
    assert x.allowed[-1].all() and x.allowed[0].tolist() == [True] * 13 + [False] * 3
    assert w.words() == "B=1, H=8, kv 2, S=16, q_len 4, D=64, fp32, causal" and w.queries == 4 and w.offset == 12
    assert w.score_elements == 8 * 4 * 16 and w.moved_bytes("forward") == (2 * 8 * 4 + 2 * 2 * 16) * 64 * 4
    assert Workload.cpu_default(q_len=512).q_len is None  # as many queries as keys: one spelling


@pytest.mark.parametrize("workload, words", [
    (Workload.blog(), "B=8, H=16, S=1024, D=64, bf16, causal"),
    (Workload.blog(causal=False, rank=3), "B=8, H=16, S=1024, D=64, bf16, not causal, rank 3"),
    (Workload.cpu_default(), "B=1, H=8, S=512, D=64, fp32, causal"),
])
def test_a_workload_in_words(workload, words):
    assert workload.words() == words
    assert workload.family() == words.replace(f"S={workload.seq_len}, ", "")


def test_inputs_are_seeded_and_never_zero():
    a, b = Workload.cpu_default(seq_len=32).make_inputs(), Workload.cpu_default(seq_len=32).make_inputs()
    assert torch.equal(a.q, b.q) and a.q.abs().sum() > 0 and not torch.equal(a.q, a.k)
    assert a.hidden.shape == (32, 32) and a.hidden[0, 1] and not a.hidden[1, 0] and torch.equal(a.allowed, ~a.hidden)
    plain = Workload.cpu_default(seq_len=32, causal=False).make_inputs()
    assert plain.hidden is None and plain.allowed is None and plain.bias is None and plain.grad_out is None


def test_each_mask_kind_allows_what_it_says():
    s = 16
    window = Workload.cpu_default(seq_len=s, mask="window", window=4).make_inputs().allowed
    for q in range(s):  # itself and the 3 keys before it
        assert window[q].nonzero().flatten().tolist() == list(range(max(0, q - 3), q + 1))
    bias = Workload.cpu_default(seq_len=s, mask="bias", causal=False).make_inputs().bias
    assert torch.isfinite(bias).all() and bias[3, 3] == 0 and bias[0, 8] == bias[8, 0] == -8 / s
    causal_bias = Workload.cpu_default(seq_len=s, mask="bias").make_inputs().bias
    assert torch.isinf(causal_bias[0, 1]) and causal_bias[1, 0] == -1 / s
    explicit = Workload.cpu_default(seq_len=s, mask="bool").make_inputs().allowed
    assert torch.equal(explicit, Workload.cpu_default(seq_len=s).make_inputs().allowed)


def test_grouped_query_heads_shape_k_and_v_and_training_adds_an_output_gradient():
    x = Workload.cpu_default(seq_len=32, heads=8, kv_heads=2, passes="fwd+bwd").make_inputs()
    assert x.q.shape == (1, 8, 32, 64) and x.k.shape == x.v.shape == (1, 2, 32, 64) and x.grad_out.shape == x.q.shape
    assert Workload.cpu_default(heads=8, kv_heads=8).kv_heads is None  # as many kv heads as heads: one spelling
    assert Workload.blog(kv_heads=4).moved_bytes("forward") == (2 * 16 + 2 * 4) * 8 * 1024 * 64 * 2


@pytest.mark.parametrize("changes, field, says", [
    ({"kv_heads": 3}, "kv_heads", "must divide heads=8"),
    ({"kv_heads": 16}, "kv_heads", "must divide heads=8"),
    ({"kv_heads": 2, "rank": 3}, "kv_heads", "needs rank 4"),
    ({"mask": "window"}, "window", "needs a window between 1 and S=512"),
    ({"mask": "window", "window": 0}, "window", "between 1 and 131072"),
    ({"mask": "window", "window": 513}, "window", "between 1 and S=512"),
    ({"window": 64}, "window", "applies with mask=window only"),
    ({"mask": "bool", "causal": False}, "mask", "set causal=true"),
    ({"mask": "window", "window": 8, "causal": False}, "mask", "set causal=true"),
    ({"passes": "backward"}, "passes", "fwd, fwd+bwd, bwd"),
    ({"mask": "causal"}, "mask", "flag, bool, bias, window"),
    ({"q_len": 513}, "q_len", "between 1 and S=512"),
    ({"q_len": 0}, "q_len", "between 1 and 131072"),
    ({"q_len": 1, "passes": "fwd+bwd"}, "q_len", "a decode step is inference"),
])
def test_combinations_that_make_no_workload_are_refused_naming_the_field(changes, field, says):
    with pytest.raises(Refusal) as caught:
        Workload.cpu_default(**changes)
    assert caught.value.field == field and says in str(caught.value)


def test_a_pass_s_flops_count_the_backward_as_the_anchors_do():
    w = Workload.blog()
    assert w.replace(passes="fwd+bwd").pass_flops == 3.5 * w.flops and w.replace(passes="bwd").pass_flops == 2.5 * w.flops


# -- the request, from every door and back ----------------------------------------------------------
def test_values_build_the_request_and_give_it_back_in_the_api_s_order():
    request = Request.from_values(BLOG_VALUES, "cpu")
    assert request.workload == Workload.blog() and (request.a, request.b) == ("sdpa_flash", "sdpa_cudnn")
    assert request.values() == [BLOG_VALUES.get(k) for k in KEYS]  # an optional field left out: empty
    assert all(k in BLOG_VALUES or f.metadata["spec"].optional for k, f in zip(KEYS[3:], FIELDS))
    assert KEYS == ("source", "a", "b", *(f.name for f in FIELDS))


def test_a_recording_replays_its_gpu_and_live_takes_this_machine():
    assert Request.from_values(BLOG_VALUES, "cpu").workload.device == "cuda"
    assert Request.from_values({**BLOG_VALUES, "source": LIVE}, "cpu").workload.device == "cpu"


@pytest.mark.parametrize("changes", [{}, {"causal": False}, {"rank": 3, "dtype": "fp32"}, {"seq_len": 4096},
                                     {"source": LIVE, "seq_len": 128, "heads": 2}])
def test_a_link_reproduces_the_request(changes):
    request = Request.from_values({**BLOG_VALUES, **changes}, "cpu")
    again, problems = Request.from_query(request.to_query(), "cpu", RECORDING)
    assert again == request and problems == []


def test_a_sweep_s_lengths_go_through_the_link():
    request = Request.from_values(BLOG_VALUES, "cpu", "4096, 128,1024")
    assert request.seq_lens == (128, 1024, 4096) and request.to_query()["seqs"] == "128,1024,4096"
    assert Request.from_query(request.to_query(), "cpu", RECORDING)[0] == request


@pytest.mark.parametrize("key, text, says", [
    ("seq", "１２８", "whole number"), ("seq", "٣٢", "whole number"), ("seq", "1_024", "whole number"),
    ("seq", "128.0", "whole number"), ("heads", "1" + "0" * 5000, "between 1 and 1024"),
    ("dtype", "BF16", "choose one of fp32, fp16, bf16, fp8"), ("a", "SDPA_FLASH", "choose one of"),
    ("causal", "yes", "true or false"), ("rank", "5", "choose one of 4, 3"), ("seqs", "128,333x", "whole number"),
    ("source", "../../etc", "choose one of live"), ("nonsense", "1", "not a parameter here"),
])
def test_a_bad_link_parameter_is_set_aside_with_why(key, text, says):
    request, problems = Request.from_query({key: text}, "cpu", RECORDING)
    assert request == Request.from_query({}, "cpu", RECORDING)[0]  # the defaults stand
    assert len(problems) == 1 and says in problems[0][1]


def test_a_bad_key_is_set_aside_and_the_good_ones_stand():
    request, problems = Request.from_query({"seq": "0", "heads": "4"}, "cpu", RECORDING)
    assert request.workload.heads == 4 and request.workload.seq_len == 1024 and problems[0][0] == "seq=0"


@pytest.mark.parametrize("text, says", [("", "at least one length"), ("128,,x", "whole number"),
                                        (" ".join(str(2**i) for i in range(1, 16)), "at most 12"),
                                        ("0", "between 1 and"), ("١٢٨", "whole number")])
def test_sweep_lengths_follow_the_rule_of_s_itself(text, says):
    with pytest.raises(Refusal) as caught:
        parse_lengths(text)
    assert caught.value.field == "seq_lens" and says in str(caught.value)


def test_the_command_line_reads_each_field_by_its_own_rule():
    parser = argparse.ArgumentParser()
    Request.add_arguments(parser)
    args = parser.parse_args(["sdpa_flash", "sdpa_cudnn", "--source", RECORDING, "--seq", "4096", "--no-causal",
                              "--head-dim", "128", "--dtype", "fp32"])
    args.points = None
    request = Request.from_args(args, "cpu")
    assert request.workload == Workload.blog(seq_len=4096, causal=False, head_dim=128, dtype="fp32")
    for bad in (["--seq", "1_024"], ["--dtype", "BF16"], ["--rank", "5"]):
        with pytest.raises(SystemExit):
            parser.parse_args(["a", "b", *bad])


def test_every_workload_field_has_a_control_a_link_key_and_an_option():
    parser = argparse.ArgumentParser()
    add_workload_arguments(parser)
    options = {a.dest for a in parser._actions}
    for f in FIELDS:
        spec = f.metadata["spec"]
        assert f.name in options and spec.label and spec.query
        assert spec.parse(f.name, spec.spell(f.default)) == f.default


# one change per field (a new field must add its own: the test below says which is missing)
ONE_CHANGE = {"batch": {"batch": 2}, "heads": {"heads": 32}, "kv_heads": {"kv_heads": 4}, "seq_len": {"seq_len": 2048},
              "lengths": {"lengths": (512, 1536, 1024, 1024)}, "q_len": {"q_len": 1}, "page_size": {"q_len": 1, "page_size": 16}, "head_dim": {"head_dim": 128},
              "dtype": {"dtype": "fp16"}, "kv_dtype": {"q_len": 1, "kv_dtype": "fp8"},
              "causal": {"causal": False}, "mask": {"mask": "bias"}, "window": {"mask": "window", "window": 256},
              "rank": {"rank": 3}, "passes": {"passes": "fwd+bwd"}, "timing": {"timing": "cold"},
              "gpus": {"gpus": 2}, "cp_rotate": {"gpus": 2, "cp_rotate": "alltoall"}, "softcap": {"softcap": 30.0}}


def test_every_field_changes_the_words_the_trace_name_and_the_blog_comparison():
    """A field spelled by hand somewhere would make two workloads read alike, their traces collide, or the blog
    comparison treat one as the blog's: every field goes through its spec."""
    from profiling.reference import BLOG

    assert set(ONE_CHANGE) == {f.name for f in FIELDS}, "give the new field one change here"
    base = Workload.blog()
    seen_words, seen_tags = {base.words()}, {base.tag()}
    for name, change in ONE_CHANGE.items():
        w = base.replace(**change)
        assert w.words() not in seen_words and w.tag() not in seen_tags, name
        seen_words.add(w.words())
        seen_tags.add(w.tag())
        assert any(d.startswith(name) for d in BLOG.differences(w)) and not BLOG.matches(w), name


def test_too_many_documents_are_refused_quoting_what_was_sent():
    """65 document lengths sent as text were quoted back as the tuple they were read into ("lengths=(16, 16, …,…
    (tuple)"); the refusal quotes the client's own text, and a list sent as a list says how many items it held."""
    from profiling.workload import MAX_DOCUMENTS

    sent = ",".join(["16"] * (MAX_DOCUMENTS + 1))
    with pytest.raises(Refusal) as refused:
        Request.build(LIVE, "varlen", "sdpa_flash", {"lengths": sent}, "cuda")
    said = str(refused.value)
    assert said.startswith("lengths='16,16,") and "(tuple)" not in said and f"({MAX_DOCUMENTS + 1} given)" in said
    with pytest.raises(Refusal) as refused:
        Request.build(LIVE, "varlen", "sdpa_flash", {"lengths": [16] * (MAX_DOCUMENTS + 1)}, "cuda")
    assert f"({MAX_DOCUMENTS + 1} items)" in str(refused.value)


@pytest.mark.parametrize("source, changes", [
    (RECORDING, {}), (RECORDING, {"seq_len": 4096, "causal": False}), (RECORDING, {"head_dim": 128, "rank": 3}),
    (RECORDING, {"q_len": 1, "kv_heads": 8, "seq_len": 8192, "page_size": 16}),
    (RECORDING, {"mask": "window", "window": 256, "timing": "cold"}), (RECORDING, {"lengths": (512, 1536)}),
    (LIVE, {}), (LIVE, {"dtype": "bf16", "batch": 8, "passes": "fwd+bwd"})])
def test_a_link_leaves_out_what_every_base_holds_and_still_reads_back_the_same_request(source, changes):
    """'Link to this comparison' listed all 20 keys, the empty ones too (~290 characters): a key is left out where
    every source's base workload (the blog's and a CPU's) holds its value, so the link reads back the same request
    on a CPU or a GPU server, and every key that sets it apart is there."""
    request = Request.build(source, "naive", "sdpa_flash", changes, "cpu")
    query = request.to_query()
    assert all(query.values()), query  # no empty key
    for device in ("cpu", "cuda") if source != LIVE else ("cpu",):
        again, problems = Request.from_query(query, device, RECORDING)
        assert again == request and problems == []
    spec_of_query = {f.metadata["spec"].query: f.name for f in FIELDS}
    set_apart = {spec_of_query[k] for k in query if k in spec_of_query}
    assert set(changes) <= set_apart  # what the request changed is in its link
    assert len(query) < 20


def test_a_number_fields_empty_placeholder_is_shown_whole_in_its_box():
    """The page's number boxes showed 8 characters of a placeholder ('contiguc' of page size's 'contiguous'): each
    optional number field's word for empty fits that."""
    numbers = [f for f in FIELDS if f.metadata["spec"].limits and not f.metadata["spec"].items
               and f.metadata["spec"].empty]
    assert numbers and all(len(f.metadata["spec"].empty) <= 8 for f in numbers), \
        {f.name: f.metadata["spec"].empty for f in numbers}


@pytest.mark.parametrize("name", sorted(ONE_CHANGE))
def test_every_field_goes_through_every_door_and_back(name):
    """Each field, changed, comes back the same through a link, the API's values, the command line and a recording's
    lookup key, and changes the trace's name: a door that spelled the fields by hand would drop a new one."""
    from profiling.replay import _problem

    source = RECORDING
    request = Request.build(source, "naive", "sdpa_flash", ONE_CHANGE[name], "cpu")
    w = request.workload
    assert getattr(w, name) != getattr(Workload.blog(), name), name
    assert Request.from_query(request.to_query(), "cpu", RECORDING) == (request, [])                     # a link
    assert Request.from_values(dict(zip(KEYS, request.values())), "cpu") == request                      # the API
    parser = argparse.ArgumentParser()
    Request.add_arguments(parser)
    argv = ["naive", "sdpa_flash", "--source", source]
    for key, text in request.to_query().items():
        if key in ("source", "a", "b"):
            continue
        option = "--" + key.replace("_", "-")
        argv += [option if text == "true" else "--no-" + option[2:]] if text in ("true", "false") else [option, text]
    args = parser.parse_args(argv)
    args.points = None
    assert Request.from_args(args, "cpu") == request                                                    # the CLI
    assert _problem(w) == w and _problem(w) != _problem(Workload.blog())                                 # replay
    assert w.tag() != Workload.blog().tag() and w.words() != Workload.blog().words()


SOURCES = ("profiling", "attention_variants", "app.py", "handlers.py", "links.py", "serving.py")
# A Workload built field by field from another's fields drops any field it does not name (a new one silently): derive
# it with `replace` instead. The few built by hand on purpose, and why a new field is rightly left out of each:
BUILT_BY_HAND = {
    ("profiling/figures.py", "mask_workload"): "the picture of the mask: the mask's own fields only",
    ("attention_variants/packed.py", "_nested_refusal"): "a probe of torch on two tiny documents, cached by the "
                                                          "fields its answer depends on (a score transform is refused "
                                                          "before it, by Variant.score_mods)",
}


def test_no_workload_is_copied_field_by_field():
    import ast
    from pathlib import Path

    root = Path(__file__).parent.parent
    files = [p for s in SOURCES for p in ((root / s).rglob("*.py") if (root / s).is_dir() else [root / s])]
    found = set()
    for path in files:
        tree = ast.parse(path.read_text())
        for function in (n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))):
            for call in ast.walk(function):
                if isinstance(call, ast.Call) and getattr(call.func, "id", getattr(call.func, "attr", None)) == \
                        "Workload" and call.keywords and all(k.arg is not None for k in call.keywords):
                    found.add((str(path.relative_to(root)), function.name))
    assert found == set(BUILT_BY_HAND), found ^ set(BUILT_BY_HAND)
