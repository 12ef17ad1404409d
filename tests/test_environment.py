"""The GPUs' peak rates against NVIDIA's datasheets, typed here from the datasheets themselves (dense tensor-core
rates, without sparsity, which the datasheets give as twice these; FP32 on CUDA cores): a peak table wrong by a factor
would make every "share of peak" wrong by it."""
from __future__ import annotations

import pytest

from profiling.environment import _peak_for

DATASHEETS = {  # device name as CUDA reports it: (bf16, fp32) TFLOP/s, the datasheet
    "NVIDIA H200": (989, 67),            # nvidia.com/en-us/data-center/h200: SXM, BF16 1,979 with sparsity
    "NVIDIA H200 NVL": (835, 60),        # the same datasheet, NVL column: BF16 1,671 with sparsity
    "NVIDIA H100 80GB HBM3": (989, 67),  # nvidia.com/en-us/data-center/h100: SXM, BF16 1,979 with sparsity
    "NVIDIA H100 PCIe": (756, 51),       # the same datasheet, PCIe column: BF16 1,513 with sparsity
    "NVIDIA A100-SXM4-80GB": (312, 19.5),  # nvidia.com/en-us/data-center/a100: BF16 312, 624 with sparsity
    "NVIDIA L4": (121, 30.3),            # nvidia.com/en-us/data-center/l4: BF16 242 with sparsity
    "NVIDIA L40S": (362, 91.6),          # nvidia.com/en-us/data-center/l40s: BF16 362.05, 733 with sparsity
}


@pytest.mark.parametrize("name, sheet", DATASHEETS.items())
def test_the_peak_table_is_the_datasheets(name, sheet):
    peaks = _peak_for(name)
    assert (round(peaks["bf16"]), peaks["fp32"]) == (round(sheet[0]), sheet[1]) and peaks["fp16"] == peaks["bf16"]


def test_a_gpu_not_listed_or_a_slice_of_one_claims_no_peak():
    assert _peak_for("NVIDIA H200 MIG 3g.71gb") is None  # ZeroGPU's slice: 60 of 132 SMs, not the datasheet's chip
    assert _peak_for("NVIDIA RTX PRO 6000 Blackwell Server Edition") is None
