"""What SDPA dispatched to, and PyTorch's own words for why it refused a backend."""
from __future__ import annotations

import re

# The SDPA op in the CPU lane says which backend ran (stable names, unlike kernel names).
SDPA_BACKEND_OPS = {
    "aten::_scaled_dot_product_flash_attention_for_cpu": "flash (CPU)",
    "aten::_scaled_dot_product_flash_attention": "flash",
    "aten::_scaled_dot_product_efficient_attention": "efficient",
    "aten::_scaled_dot_product_cudnn_attention": "cudnn",
    "aten::_scaled_dot_product_attention_math": "math",
    "aten::_scaled_dot_product_fused_attention_overrideable": "overrideable",
}

_TRIGGERED = re.compile(r"\s*\(Triggered internally at [^)]*\)\.?")
_HEADER = re.compile(r"^(?P<backend>.+?) (?:kernel )?not used because:?$")


def clean_warning(message: str) -> str:
    """Drop the C++ source location PyTorch appends to its warnings."""
    return _TRIGGERED.sub("", message).strip()


def refusals(warnings: list[str]) -> dict[str, list[str]]:
    """SDPA's warnings come in pairs, 'Flash attention kernel not used because:' then the reason:
    return {'Flash attention': ['Expected query, key and value to all be of dtype: ...']}."""
    reasons: dict[str, list[str]] = {}
    current = None
    for message in map(clean_warning, warnings):
        header = _HEADER.match(message)
        if header:
            current = header.group("backend")
            reasons.setdefault(current, [])
        elif current is not None:
            reasons[current].append(message)
    return reasons
