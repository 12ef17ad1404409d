"""A request: which source (live, or a recording), variants A and B, and the workload; for a sweep, its axis (S, or
the batch B) and its values.

Built once, from the page's controls or the API (values as sent), a link's query (text) or the command line, and
written back to a link: every conversion iterates the workload's `FIELDS`, so a new field needs no caller changed.
Each value is checked as sent, never rounded or coerced, and a bad one is a `Refusal` naming the field.
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any, Mapping

from attention_variants import KEYS as VARIANT_KEYS, get_variant

from .replay import recordings
from .workload import FIELDS, Refusal, Workload, choice, spec_of, whole_number_from_text

LIVE = "live"
MAX_LENGTHS = 12                     # per sweep: a sweep is a curve, not a matrix
SWEEP_AXES = ("seq_len", "batch")    # the workload fields a sweep may vary (the API's `axis`, the link's)
EXAMPLES = {"seq_len": "'128, 256, 512'", "batch": "'1, 8, 64'"}
DEFAULT_A, DEFAULT_B = "naive", "sdpa_flash"
# The serving policy: what a live request may hold the machine for, by device, priced before it runs (the cost
# model, budget.check_time) and guarded while it does. cuda: ZeroGPU grants the GPU function 120 s in all.
LIVE_BUDGET_S = {"cpu": 60.0, "cuda": 90.0}
# The API's and the page's values, in order: the source, A and B, then the workload's fields.
KEYS = ("source", "a", "b", *(f.name for f in FIELDS))


def _optional(key: str) -> bool:
    """A workload field that may be left out (it means its default: kv heads as heads, queries as keys, ...)."""
    return any(f.name == key and f.metadata["spec"].optional for f in FIELDS)


def sources() -> list[str]:
    return [LIVE, *recordings()]


def base_workload(source: str, live_device: str) -> Workload:
    """The workload a source starts from: the blog's on a GPU and in a recording; on a CPU, one sized for it."""
    if source == LIVE and live_device == "cpu":
        return Workload.cpu_default()
    return Workload.blog()


def parse_lengths(text: str, field: str = "seq_lens", axis: str = "seq_len") -> tuple[int, ...]:
    """'128, 256,512' -> sorted unique values within the axis field's limits (S's by default), at most MAX_LENGTHS;
    the same rule as the field itself (ASCII digits only)."""
    said = "lengths" if axis == "seq_len" else "values"
    if not isinstance(text, str):
        raise Refusal(field, text, f"a text of {said} such as {EXAMPLES[axis]}")
    low, high = spec_of(axis).limits
    items = text.replace(",", " ").split()
    if not items:
        raise Refusal(field, text, f"give at least one {said[:-1]}, such as {EXAMPLES[axis]}")
    lengths = {whole_number_from_text(field, item, low, high) for item in items}
    if len(lengths) > MAX_LENGTHS:
        raise Refusal(field, text, f"at most {MAX_LENGTHS} {said} per sweep ({len(lengths)} given)")
    return tuple(sorted(lengths))


@dataclass(frozen=True)
class Request:
    source: str
    a: str
    b: str
    workload: Workload
    seq_lens: tuple[int, ...] | None = None   # a sweep's values of its axis; None: the plan chooses
    axis: str = "seq_len"                     # a sweep's axis: the workload field it varies (SWEEP_AXES)

    @property
    def live(self) -> bool:
        return self.source == LIVE

    @classmethod
    def build(cls, source, a, b, fields: Mapping[str, Any], live_device: str,
              seq_lens: tuple[int, ...] | None = None, axis: str = "seq_len") -> "Request":
        """A request from values as sent; fields left out take the source's base workload's."""
        source = choice("source", source, sources())
        axis = choice("axis", axis, SWEEP_AXES)
        a, b = get_variant(a, "a").key, get_variant(b, "b").key
        base = base_workload(source, live_device)
        device = live_device if source == LIVE else "cuda"  # a recording replays the GPU it was made on
        values = {f.name: fields.get(f.name, getattr(base, f.name)) for f in FIELDS}
        for f in FIELDS:  # each field checked as sent, in order, before the workload checks them together
            values[f.name] = f.metadata["spec"].check(f.name, values[f.name])
        _documents_own_b_and_s(values["lengths"], fields)
        return cls(source, a, b, Workload(**values, device=device), seq_lens, axis)

    @classmethod
    def from_values(cls, values: Mapping[str, Any], live_device: str, seq_lens: str | None = None,
                    axis: str | None = None) -> "Request":
        """The API's and the page's values (KEYS), exactly as the client sent them; a sweep's values of its axis as
        text (empty: the plan chooses), and its axis (None: S)."""
        missing = [key for key in KEYS if key not in values and not _optional(key)]
        if missing:
            raise Refusal(missing[0], None, f"the request must give {', '.join(missing)}")
        axis = "seq_len" if axis is None else choice("axis", axis, SWEEP_AXES)
        lengths = parse_lengths(seq_lens, axis=axis) if isinstance(seq_lens, str) and seq_lens.strip() else None
        if seq_lens is not None and not isinstance(seq_lens, str):
            raise Refusal("seq_lens", seq_lens, f"a text of {'lengths' if axis == 'seq_len' else 'values'} such as "
                                                f"{EXAMPLES[axis]}, or empty")
        return cls.build(values["source"], values["a"], values["b"], values, live_device, lengths, axis)

    def values(self, page: bool = False) -> list:
        """KEYS' values, in order: what the API takes, or (`page`) what the page's controls show."""
        return [self.source, self.a, self.b, *field_values(self.workload, page)]

    # -- a link ---------------------------------------------------------------------------------------
    def to_query(self) -> dict[str, str]:
        """The request as a link's query: source, a, b, each workload field by its query key, and seqs. A field whose
        value every source's base workload holds (`base_workload`: the blog's, a CPU's) is left out, an empty one
        among them: the link reads back the same wherever it is opened, and lists what sets this request apart."""
        query = {"source": self.source, "a": self.a, "b": self.b}
        bases = (Workload.blog(), Workload.cpu_default())
        for f in FIELDS:
            spec, value = f.metadata["spec"], getattr(self.workload, f.name)
            if all(getattr(base, f.name) == value for base in bases):
                continue
            query[spec.query] = spec.spell(value)
        if self.seq_lens:
            query["seqs"] = ",".join(map(str, self.seq_lens))
        if self.axis != "seq_len":
            query["axis"] = self.axis
        return query

    @classmethod
    def from_query(cls, params: Mapping[str, str], live_device: str, default_source: str,
                   page_keys: tuple[str, ...] = ()) -> tuple["Request", list[tuple[str, str]]]:
        """A link's query -> the request it names (defaults where absent or wrong) and, for each parameter set
        aside, (its key and value as written, why). Keys in `page_keys` are the page's own (left to it); keys that
        start with "__" are gradio's."""
        problems: list[tuple[str, str]] = []

        def refuse(key: str, text: str, error: Refusal) -> None:
            problems.append((f"{key}={text}", error.limit))

        source = params.get("source", default_source)
        if source not in sources():
            refuse("source", source, Refusal("source", source, f"choose one of {', '.join(sources())}"))
            source = default_source
        a, b = DEFAULT_A, DEFAULT_B
        by_query = {f.metadata["spec"].query: f for f in FIELDS}
        fields: dict[str, Any] = {}
        lengths, axis = None, "seq_len"
        if "axis" in params:
            try:
                axis = choice("axis", params["axis"], SWEEP_AXES)
            except Refusal as error:
                refuse("axis", params["axis"], error)
        for key, text in params.items():
            try:
                if key.startswith("__") or key in page_keys or key in ("source", "axis"):
                    continue
                if key in ("a", "b"):
                    chosen = get_variant(text, key).key
                    a, b = (chosen, b) if key == "a" else (a, chosen)
                elif key in by_query:
                    f = by_query[key]
                    fields[f.name] = f.metadata["spec"].parse(f.name, text)
                elif key == "seqs":
                    lengths = parse_lengths(text, "seqs", axis)
                else:
                    problems.append((key, "not a parameter here (use "
                                     + ", ".join(["source", "a", "b", *by_query, "seqs", "axis", *page_keys]) + ")"))
            except Refusal as error:
                refuse(key, text, error)
        try:
            return cls.build(source, a, b, fields, live_device, lengths, axis), problems
        except Refusal as error:  # fields fine alone, refused together: the base workload instead
            refuse(error.field, str(error.value), error)
            return cls.build(source, a, b, {}, live_device, lengths, axis), problems

    # -- the command line ------------------------------------------------------------------------------
    @staticmethod
    def add_arguments(parser: argparse.ArgumentParser, skip: tuple[str, ...] = ()) -> None:
        """A, B, --source and the workload's options (`add_workload_arguments`)."""
        parser.add_argument("a", help="variant A (see `list`): " + ", ".join(VARIANT_KEYS))
        parser.add_argument("b", help="variant B")
        parser.add_argument("--source", help="replay a recording instead of measuring: "
                                             + (", ".join(recordings()) or "none shipped"))
        add_workload_arguments(parser, skip)

    @classmethod
    def from_args(cls, args: argparse.Namespace, live_device: str) -> "Request":
        fields = {f.name: getattr(args, f.name) for f in FIELDS if getattr(args, f.name, None) is not None}
        return cls.build(LIVE if args.source is None else args.source, args.a, args.b, fields, live_device,
                         getattr(args, "points", None), getattr(args, "axis", None) or "seq_len")


def _documents_own_b_and_s(documents: tuple[int, ...] | None, sent: Mapping[str, Any]) -> None:
    """Packed documents set B (their count) and S (the longest): a batch or seq_len sent beside them must be those,
    or it is refused (it was once replaced without a word)."""
    if not documents:
        return
    for name, implied in (("batch", len(documents)), ("seq_len", max(documents))):
        if sent.get(name) is not None and sent[name] != implied:
            symbol = "B" if name == "batch" else "S"
            why = "their count" if name == "batch" else "the longest"
            raise Refusal(name, sent[name], f"lengths={','.join(map(str, documents))} set {symbol}={implied} ({why}): "
                                            f"send {implied} or leave {name} out")


def field_values(workload: Workload, page: bool = False) -> list:
    """The workload's fields as the API holds them, or (`page`) as the page's controls show them: a list field as its
    text ("512,1536"); on the page an optional menu left empty as its empty entry ("", shown as "as dtype")."""
    values = []
    for f in FIELDS:
        spec, value = f.metadata["spec"], getattr(workload, f.name)
        if page and value is None and spec.optional and spec.choices:
            value = ""
        values.append(spec.spell(value) if spec.items and value is not None else value)
    return values


def add_workload_arguments(parser: argparse.ArgumentParser, skip: tuple[str, ...] = ()) -> None:
    """An option per workload field (but those in `skip`), each read by the field's own rule."""
    for f in FIELDS:
        if f.name in skip:
            continue
        spec = f.metadata["spec"]
        option = "--" + spec.query.replace("_", "-")
        if spec.boolean:
            parser.add_argument(option, dest=f.name, action=argparse.BooleanOptionalAction, default=None,
                                help=field_help(f))
            continue
        parser.add_argument(option, dest=f.name, type=_argument(f.name), metavar=f.name.upper(), help=field_help(f))


def field_help(f) -> str:
    """A workload field's help, from its spec: its label, what it takes and what it means. The command line's
    --help and the page's field guide say the same words."""
    spec = f.metadata["spec"]
    if spec.boolean:
        return f"{spec.label} (default: {'on' if f.default else 'off'})"
    allowed = f"{spec.limits[0]}-{spec.limits[1]}" if spec.limits else ", ".join(map(str, spec.choices))
    if spec.real:
        allowed = f"a number above {spec.limits[0]}, at most {spec.limits[1]}"
    if spec.items:
        allowed = f"up to {spec.items} of {allowed}, commas between"
    return f"{spec.label}: {allowed}" + (f" ({spec.help})" if spec.help else "")


def _argument(name: str):
    """An argparse type: the field's own parse rule, refused in the same words as everywhere else."""
    def parse(text: str):
        try:
            return spec_of(name).parse(name, text)
        except Refusal as error:
            raise argparse.ArgumentTypeError(str(error)) from None
    parse.__name__ = name  # argparse names the type in some messages
    return parse
