"""What SDPA's GPU paths allocate for a decode step (fewer queries than keys), beyond their output, so that the
variants' memory estimates (`attention_variants/sdpa.py`) bound the peak from what the ops allocate:

- A causal decode step is written with `causal_lower_right` (torch/nn/attention/bias.py, CausalBias._dispatch): it
  calls the flash kernel itself where `can_use_flash_attention` passes, else memory-efficient with a lower-right mask
  type, else it materialises the Lq×S bool mask and calls SDPA with it, which turns it into an additive mask of the
  inputs' dtype (pinned to cuDNN or math, the trace shows `triu_tril_kernel` and `where`).
- PyTorch's flash (FlashAttention-2, aten/src/ATen/native/transformers/cuda/flash_attn/flash_api.cpp) splits the keys
  when the (batch, head, 64-query block) tiles fill under 80% of two blocks per SM (`num_splits_heuristic`), and
  keeps an fp32 partial output (head_dim rounded up to 32) and log-sum-exp per split; with one query and grouped
  heads it first folds the query heads of a kv head into its query rows (`seqlenq_ngroups_swapped`).
- cuDNN's decode kernels (closed source) also split the keys and merge with `lean_reduction_kernel`; the recorded
  H200 grids show (splits, Hkv·⌈groups/16⌉, B) blocks with at most the largest power of two of splits that keeps
  the tiles within 2·SMs, never more than one per 128 keys, each an fp32 partial output and two row statistics per
  query row. That is read off the traces, not the source: a bound, not a prediction.
"""
from __future__ import annotations

import math

from .workload import Workload

FLASH_QUERY_BLOCK = 64          # flash_api.cpp: num_m_blocks = ceil(seqlen_q / 64)
FLASH_MAX_SPLITS = 128
MOST_SMS = 160                  # where a recording did not keep its GPU's SM count: more than any GPU has (B200: 148)


def _flash_key_block(head_dim: int) -> int:
    """flash_api.cpp, set_params_splitkv: block_n = 256 up to head_dim 64, 128 up to 128, else 64."""
    return 256 if head_dim <= 64 else 128 if head_dim <= 128 else 64


def flash_rows(w: Workload) -> tuple[int, int]:
    """(heads, query rows per head) as PyTorch's flash sees them: one query with grouped heads is folded into
    (Hkv heads, H/Hkv rows) when no window or dropout stops it (flash_api.cpp, seqlenq_ngroups_swapped)."""
    if w.queries == 1 and w.groups > 1 and w.mask == "flag" and w.head_dim % 8 == 0:
        return w.kv_head_count, w.groups
    return w.heads, w.queries


SPLIT_BELOW = 0.8  # flash_api.cpp, num_splits_heuristic: one split once the tiles fill 80% of two blocks per SM


def splits_heuristic(tiles: int, sms: int, key_blocks: int, max_splits: int = FLASH_MAX_SPLITS) -> int:
    """flash_api.cpp, num_splits_heuristic, line for line: one split once the tiles fill 80% of `sms` (two blocks
    per SM); else the fewest splits within 85% of the best wave efficiency, skipping counts that give the same
    blocks per split as one fewer."""
    if tiles >= SPLIT_BELOW * sms:
        return 1
    max_splits = min(max_splits, sms, key_blocks)

    def eligible(n: int) -> bool:
        return n == 1 or math.ceil(key_blocks / n) != math.ceil(key_blocks / (n - 1))

    efficiency = {}
    for n in range(1, max_splits + 1):
        if eligible(n):
            waves = tiles * n / sms
            efficiency[n] = waves / math.ceil(waves)
    best = max(efficiency.values(), default=0.0)
    return next((n for n, e in efficiency.items() if e >= 0.85 * best), 1)


def flash_splits(w: Workload, sm_count: int | None) -> int:
    """The number of key splits PyTorch's flash forward takes on a GPU of `sm_count` SMs. Where the count is unknown,
    the most any count up to MOST_SMS gives: the estimate is a bound."""
    heads, rows = flash_rows(w)
    tiles = w.batch * heads * math.ceil(rows / FLASH_QUERY_BLOCK)
    key_blocks = math.ceil(w.seq_len / _flash_key_block(w.head_dim))
    if sm_count is None:
        return max(splits_heuristic(tiles, 2 * n, key_blocks) for n in range(1, MOST_SMS + 1))
    return splits_heuristic(tiles, 2 * sm_count, key_blocks)


def _partials(w: Workload, splits: int, row_floats: int) -> int:
    return 0 if splits <= 1 else splits * w.batch * w.heads * w.queries * row_floats * 4


def flash_split_bytes(w: Workload, sm_count: int | None) -> int:
    """The split-KV buffers: fp32 out_accum (head_dim rounded up to 32) and softmax_lse_accum per split."""
    return _partials(w, flash_splits(w, sm_count), 32 * math.ceil(w.head_dim / 32) + 1)


def cudnn_splits(w: Workload, sm_count: int | None) -> int:
    """The most key splits the recorded cuDNN decode grids take (see the module's note)."""
    if w.training or w.queries > 1:
        return 1
    tiles = w.batch * w.kv_head_count * math.ceil(w.groups / 16)
    most = 2 ** int(math.log2(max(1, (2 * (sm_count or MOST_SMS)) // tiles)))
    return max(1, min(most, math.ceil(w.seq_len / 128)))


def cudnn_split_bytes(w: Workload, sm_count: int | None) -> int:
    return _partials(w, cudnn_splits(w, sm_count), w.head_dim + 2)

