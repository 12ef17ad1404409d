"""Numbers into words, one spelling each."""
from __future__ import annotations

import pytest

from profiling import text
from profiling.results import Quantity


@pytest.mark.parametrize("unit, value, words", [
    ("ms", 0.0603, "0.060 ms"), ("ms", 20.1083, "20.108 ms"), ("us", 57.34, "57.3 µs"), ("us", 7882.6, "7.883 ms"),
    ("s", 139.3, "139 ms"), ("s", 3330.4, "3.33 s"), ("bytes", 512, "512 B"), ("bytes", 49152, "48.0 KiB"),
    ("bytes", 256 * 2**20, "256.0 MiB"), ("bytes", 8 * 2**30, "8.0 GiB"), ("share", 0.387, "39%"),
    ("share", 0.013, "1.3%"), ("pct", 12.5, "12.5%"), ("pct", 5.88, "5.9%"), ("x", 2.14, "2.1×"), ("x", 21.3, "21×"),
    ("count", 1.9999999, "2"), ("count", 4096, "4,096"),
])
def test_each_unit_has_one_spelling(unit, value, words):
    assert text.quantity(Quantity(value, unit, "test")) == words


def test_one_truncation_rule():
    assert text.clip("cudnn_generated_fort_native_sdpa", 10) == "cudnn_gen…" and text.clip("short", 10) == "short"


def test_sentences_are_filled_from_facts_and_names():
    facts = {"time": Quantity(126.8, "us", "run.kernels[3].us_per_forward")}
    assert text.fill("{kernel} takes {time}", facts, {"kernel": "Memcpy DtoD"}) == "Memcpy DtoD takes 126.8 µs"


def test_the_glossary_finds_whole_terms():
    assert text.terms_in("cuDNN's wgmma kernel, launched with cuLaunchKernelEx") == ["wgmma", "cuLaunchKernelEx"]
    assert text.terms_in("no jargon here") == [] and text.terms_in("32-bit indexing splits it") == ["32-bit indexing"]
    assert all(len(gloss.split()) <= 20 for gloss in text.GLOSSARY.values())  # one line each
