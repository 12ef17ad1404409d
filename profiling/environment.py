"""What this process runs on: read at run time, never assumed."""
from __future__ import annotations

import platform
from dataclasses import asdict, dataclass

import torch

from .cpu_paths import read_features

# Dense datasheet peaks in TFLOP/s (tensor cores for fp16/bf16, without sparsity; plain FP32 on CUDA cores), from
# NVIDIA's datasheets (tests/test_environment.py holds each with its source). Only used to show "share of peak";
# a GPU not listed, or a MIG slice (a part of the chip), shows none. Longest names first: "H200 NVL" before "H200".
_PEAK_TFLOPS = {
    "H200 NVL": {"bf16": 835.0, "fp16": 835.0, "fp32": 60.0},
    "H200": {"bf16": 989.0, "fp16": 989.0, "fp32": 67.0},
    "H100 80GB HBM3": {"bf16": 989.0, "fp16": 989.0, "fp32": 67.0},
    "H100 PCIe": {"bf16": 756.0, "fp16": 756.0, "fp32": 51.0},
    "A100": {"bf16": 312.0, "fp16": 312.0, "fp32": 19.5},
    "L40S": {"bf16": 362.0, "fp16": 362.0, "fp32": 91.6},
    "L4": {"bf16": 121.0, "fp16": 121.0, "fp32": 30.3},
    "T4": {"fp16": 65.0, "fp32": 8.1},
}


# Datasheet HBM (or GDDR) bandwidth in bytes per µs (decimal, as datasheets give it: 4.8 TB/s = 4.8e6 B/µs), by the
# same kind of name key. A decode step is memory-bound: its achieved bytes per second are set against this, labelled as
# the datasheet's (a measured copy ceiling is lower: the H200's device-to-device copy reaches about 4.3 TB/s).
HBM_BYTES_PER_US = {
    "H200": 4.8e6,
    "H100 80GB HBM3": 3.35e6,
    "H100 PCIe": 2.0e6,
    "A100-SXM4-80GB": 2.039e6,
    "A100-SXM4-40GB": 1.555e6,
    "A100 80GB PCIe": 1.935e6,
    "L4": 0.3e6,
    "A10G": 0.6e6,
    "L40S": 0.864e6,
    "T4": 0.32e6,
}


def hbm_key(device_name: str) -> str | None:
    """The key of HBM_BYTES_PER_US that names this device ("H200" for "NVIDIA H200"), or None when it is not listed."""
    return next((key for key in HBM_BYTES_PER_US if key in device_name), None)


def torch_release(version: str = torch.__version__) -> tuple[int, int]:
    """(major, minor) of a torch version, e.g. (2, 11) for '2.11.0+cu130'; the running one by default."""
    major, minor = version.split("+")[0].split(".")[:2]
    return int(major), int(minor)


@dataclass(frozen=True)
class Environment:
    device: str                      # "cuda" or "cpu"
    device_name: str                 # "NVIDIA H200", or the CPU model
    compute_capability: tuple[int, int] | None
    torch_version: str
    cuda_version: str | None
    cudnn_version: int | None        # e.g. 91900 for 9.19.0
    triton_version: str | None
    python_version: str
    total_memory_bytes: int | None
    peak_tflops: dict[str, float] | None
    cpu_threads: int | None = None   # torch's intra-op threads: CPU kernels split their work by them
    cpu_features: tuple[str, ...] | None = None  # a CPU run's instruction flags that pick PyTorch's paths (cpu_paths)

    @property
    def torch_release(self) -> tuple[int, int]:
        return torch_release(self.torch_version)

    @property
    def cudnn_label(self) -> str | None:
        if not self.cudnn_version:
            return None
        v = self.cudnn_version
        return f"{v // 10000}.{v // 100 % 100}.{v % 100}" if v >= 10000 else str(v)

    @property
    def sm(self) -> str | None:
        """'sm90' for compute capability (9, 0)."""
        return f"sm{self.compute_capability[0]}{self.compute_capability[1]}" if self.compute_capability else None

    def summary(self) -> str:
        parts = [self.device_name]
        if self.compute_capability:
            parts.append(f"compute capability {self.compute_capability[0]}.{self.compute_capability[1]}")
        parts.append(f"torch {self.torch_version}")
        if self.cuda_version:
            parts.append(f"CUDA {self.cuda_version}")
        if self.cudnn_label:
            parts.append(f"cuDNN {self.cudnn_label}")
        return " · ".join(parts)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "Environment":
        data = dict(data)
        for key in ("compute_capability", "cpu_features"):
            if data.get(key) is not None:
                data[key] = tuple(data[key])
        return cls(**data)


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "CPU"


def _peak_for(name: str) -> dict[str, float] | None:
    if "MIG" in name:  # a slice of the chip: the datasheet's peak is the whole chip's
        return None
    for key, peaks in _PEAK_TFLOPS.items():
        if key in name:
            return peaks
    return None


def _triton_version() -> str | None:
    try:
        import triton
        return triton.__version__
    except Exception:  # absent, or broken on this platform
        return None


def detect(device: str | None = None) -> Environment:
    """The environment of `device` ("cuda" or "cpu"); by default the GPU when there is one."""
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    common = dict(torch_version=torch.__version__, python_version=platform.python_version(),
                  triton_version=_triton_version(), cpu_threads=torch.get_num_threads())
    if device == "cuda":
        props = torch.cuda.get_device_properties(torch.cuda.current_device())
        return Environment(
            device="cuda", device_name=props.name, compute_capability=(props.major, props.minor),
            cuda_version=torch.version.cuda, cudnn_version=torch.backends.cudnn.version(),
            total_memory_bytes=props.total_memory, peak_tflops=_peak_for(props.name), **common)
    return Environment(
        device="cpu", device_name=_cpu_name(), compute_capability=None, cuda_version=None,
        cudnn_version=None, total_memory_bytes=None, peak_tflops=None, cpu_features=read_features(), **common)
