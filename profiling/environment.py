"""What this process runs on: read at run time, never assumed. On a GPU also what a figure depends on beyond the
model: the L2's size (a warm loop reads from it), the SMs (a MIG slice has fewer), the clocks (read by NVML or
nvidia-smi where either is there; never a failure where neither is)."""
from __future__ import annotations

import functools
import importlib.metadata
import platform
import shutil
import subprocess
import sys
from dataclasses import asdict, dataclass

# torch is imported where a device is asked about: a recording's environment is read, and the command line answers,
# without it

# Dense datasheet peaks in TFLOP/s (tensor cores for fp16/bf16, without sparsity; plain FP32 on CUDA cores), from
# NVIDIA's datasheets (tests/test_environment.py holds each with its source). Only used to show "share of peak";
# a GPU not listed, or a MIG slice (a part of the chip), shows none. Longest names first: "H200 NVL" before "H200".
PEAK_TFLOPS = {
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


def torch_release(version: str | None = None) -> tuple[int, int]:
    """(major, minor) of a torch version, e.g. (2, 11) for '2.11.0+cu130'; the running one by default."""
    if version is None:
        import torch

        version = torch.__version__
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
    l2_cache_bytes: int | None = None  # the GPU's L2, as the device reports it
    sm_count: int | None = None        # SMs this process can use (a MIG slice: its own)
    mig: bool | None = None            # the GPU is a MIG slice (its name says so, or NVML / nvidia-smi)
    max_sm_clock_mhz: int | None = None  # the SM clock's maximum (NVML / nvidia-smi)
    copy_bytes_per_s: float | None = None  # a large device-to-device copy's bytes read + written per second, measured
                                           # once per process (timing.copy_ceiling): what memory traffic is set against
    matmul_flops_per_s: dict[str, float] | None = None  # a large matmul's FLOPs per second by dtype, measured once per
                                                        # process (timing.matmul_rate): the roofline's compute roof
    matmul_tf32: bool | None = None    # the fp32 rate's product ran with TF32 allowed (torch's setting); None: no fp32
                                       # rate measured

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


@dataclass(frozen=True)
class Clocks:
    """The GPU's clocks at one moment, in MHz (None where they could not be read)."""
    sm_mhz: int | None
    memory_mhz: int | None


# -- NVML or nvidia-smi: the clocks and the MIG mode (NVML alone: the energy counter), for the GPU torch calls `index`
_SMI_QUERY = "pci.bus_id,clocks.sm,clocks.mem,clocks.max.sm,mig.mode.current"
_SMI_TIMEOUT_S = 5.0


def _number(text: str) -> int | None:
    text = text.strip()
    return int(float(text)) if text.replace(".", "", 1).isdigit() else None  # "[N/A]", "[Not Supported]": None


def _pci(text: str) -> tuple[int, int, int] | None:
    """'00000000:17:00.0' -> (domain, bus, device)."""
    try:
        domain, bus, rest = text.strip().split(":")
        return int(domain, 16), int(bus, 16), int(rest.split(".")[0], 16)
    except ValueError:
        return None


def parse_smi(output: str, pci: tuple[int, int, int] | None) -> dict | None:
    """nvidia-smi's `--query-gpu=<_SMI_QUERY> --format=csv,noheader,nounits` output -> the row of the GPU at `pci`
    (the only row, where the PCI address is unknown), as {sm, mem, max_sm, mig}; None where no row is that GPU."""
    rows = [[c.strip() for c in line.split(",")] for line in output.strip().splitlines() if line.count(",") == 4]
    row = next((r for r in rows if pci is not None and _pci(r[0]) == pci), None)
    if row is None and len(rows) == 1 and pci is None:
        row = rows[0]
    if row is None:
        return None
    return {"sm": _number(row[1]), "mem": _number(row[2]), "max_sm": _number(row[3]),
            "mig": {"enabled": True, "disabled": False}.get(row[4].lower())}


def _device_pci(index: int) -> tuple[int, int, int] | None:
    import torch

    props = torch.cuda.get_device_properties(index)
    ids = [getattr(props, name, None) for name in ("pci_domain_id", "pci_bus_id", "pci_device_id")]
    return tuple(ids) if all(isinstance(i, int) for i in ids) else None


# NVML's C API, called through ctypes (libnvidia-ml ships with every NVIDIA driver; no Python binding is needed): a
# read takes microseconds where nvidia-smi's process takes ~0.1 s, and a measurement reads the clocks twice. The
# enums and signatures are NVML's (nvml.h): NVML_CLOCK_SM = 1, NVML_CLOCK_MEM = 2, NVML_SUCCESS = 0.
_NVML_CLOCK_SM, _NVML_CLOCK_MEM = 1, 2


@functools.cache
def _nvml_library():
    """libnvidia-ml, initialised once per process; None where it is not there or does not start."""
    import ctypes

    try:
        library = ctypes.CDLL("libnvidia-ml.so.1")
        return library if library.nvmlInit_v2() == 0 else None
    except (OSError, AttributeError):
        return None


def _nvml_handle(library, pci: tuple[int, int, int]):
    """NVML's handle of the GPU at PCI address `pci`; None where NVML does not know it."""
    import ctypes

    handle = ctypes.c_void_p()
    if library.nvmlDeviceGetHandleByPciBusId_v2(f"{pci[0]:08x}:{pci[1]:02x}:{pci[2]:02x}.0".encode(),
                                                ctypes.byref(handle)) != 0:
        return None
    return handle


class NoEnergy(Exception):
    """NVML gives no energy counter for the GPU; the message says why, in one line."""


def energy_mj(index: int = 0) -> int:
    """NVML's total-energy counter of the GPU torch calls `index` (`nvmlDeviceGetTotalEnergyConsumption`: mJ since
    the driver loaded; Volta and later), read through the same library as the clocks. NoEnergy where NVML is absent,
    does not know the GPU, or does not give the counter."""
    import ctypes

    library = _nvml_library()
    if library is None:
        raise NoEnergy("NVML is absent (libnvidia-ml.so.1 did not load or start): no energy counter to read")
    try:
        pci = _device_pci(index)
    except Exception:
        pci = None
    handle = _nvml_handle(library, pci) if pci is not None else None
    if handle is None:
        raise NoEnergy("NVML does not know this GPU by its PCI address: no energy counter to read")
    value = ctypes.c_ulonglong()
    code = library.nvmlDeviceGetTotalEnergyConsumption(handle, ctypes.byref(value))
    if code != 0:
        raise NoEnergy(f"NVML gives no energy counter for this GPU (nvmlDeviceGetTotalEnergyConsumption returned "
                       f"error {code})")
    return value.value


def _nvml(pci: tuple[int, int, int], static: bool = True) -> dict | None:
    """The same figures through NVML's library: no process to start (without `static`, the clocks alone: a clock
    read took ~4 ms on a lent H100's host, the GPU parked all the while). None where it is absent or does not
    answer."""
    import ctypes

    library = _nvml_library()
    handle = _nvml_handle(library, pci) if library is not None else None
    if handle is None:
        return None

    def read(function, *args) -> int | None:
        value = ctypes.c_uint()
        return value.value if function(handle, *args, ctypes.byref(value)) == 0 else None

    sm, mem = read(library.nvmlDeviceGetClockInfo, _NVML_CLOCK_SM), read(library.nvmlDeviceGetClockInfo,
                                                                          _NVML_CLOCK_MEM)
    if sm is None and mem is None:
        return None
    if not static:
        return {"sm": sm, "mem": mem}
    current, pending = ctypes.c_uint(), ctypes.c_uint()
    mig = (bool(current.value) if library.nvmlDeviceGetMigMode(handle, ctypes.byref(current), ctypes.byref(pending))
           == 0 else None)  # not supported (a GPU without MIG): None
    return {"sm": sm, "mem": mem, "max_sm": read(library.nvmlDeviceGetMaxClockInfo, _NVML_CLOCK_SM), "mig": mig}


def gpu_state(index: int = 0, static: bool = True) -> dict | None:
    """{sm, mem, max_sm, mig} of the GPU torch calls `index`, from NVML or nvidia-smi (through NVML without `static`:
    {sm, mem} alone); None where neither answers."""
    try:
        pci = _device_pci(index)
    except Exception:
        pci = None
    if pci is not None and (state := _nvml(pci, static)) is not None:
        return state
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    try:
        done = subprocess.run([smi, f"--query-gpu={_SMI_QUERY}", "--format=csv,noheader,nounits"],
                              capture_output=True, text=True, timeout=_SMI_TIMEOUT_S, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return parse_smi(done.stdout, pci) if done.returncode == 0 else None


def read_clocks(index: int = 0) -> Clocks | None:
    state = gpu_state(index, static=False)  # the maximum and the MIG mode are read once (_static_state)
    return Clocks(state["sm"], state["mem"]) if state else None


@functools.cache
def _static_state(index: int) -> tuple[int | None, bool | None]:
    """(the SM clock's maximum, the MIG mode): read once per process."""
    state = gpu_state(index) or {}
    return state.get("max_sm"), state.get("mig")


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
    for key, peaks in PEAK_TFLOPS.items():
        if key in name:
            return peaks
    return None


def _triton_version() -> str | None:
    """The installed triton's version, read from its package metadata: importing triton to ask (~1 s) would be paid
    by every start of the app, which has no use for triton until a compiled variant runs."""
    if sys.modules.get("triton") is not None:
        return getattr(sys.modules["triton"], "__version__", None)
    for distribution in ("triton", "pytorch-triton", "pytorch-triton-rocm"):  # torch's releases, its nightlies, ROCm
        try:
            return importlib.metadata.version(distribution)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def detect(device: str | None = None) -> Environment:
    """The environment of `device` ("cuda" or "cpu"); by default the GPU when there is one."""
    import torch

    from .cpu_paths import read_features

    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    common = dict(torch_version=torch.__version__, python_version=platform.python_version(),
                  triton_version=_triton_version(), cpu_threads=torch.get_num_threads())
    if device == "cuda":
        index = torch.cuda.current_device()
        props = torch.cuda.get_device_properties(index)
        max_sm, mig = _static_state(index)
        return Environment(
            device="cuda", device_name=props.name, compute_capability=(props.major, props.minor),
            cuda_version=torch.version.cuda, cudnn_version=torch.backends.cudnn.version(),
            total_memory_bytes=props.total_memory, peak_tflops=_peak_for(props.name),
            l2_cache_bytes=getattr(props, "L2_cache_size", None) or None, sm_count=props.multi_processor_count,
            mig=True if "MIG" in props.name else mig, max_sm_clock_mhz=max_sm, **common)
    return Environment(
        device="cpu", device_name=_cpu_name(), compute_capability=None, cuda_version=None,
        cudnn_version=None, total_memory_bytes=None, peak_tflops=None, cpu_features=read_features(), **common)
