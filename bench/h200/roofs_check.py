"""On the lent GPU: the roofs a roofline would draw, measured (bf16 8192³ matmul TFLOP/s, device-to-device copy
TB/s) and NVML's energy counter around ≥1 s loops (J per call, mean W) for a GEMM and SDPA's cuDNN forward at the
blog workload: whether the counter moves here, and what it reads. Facts for issue 56, printed, nothing kept."""
import time

import torch
import torch.nn.functional as F

dev = "cuda"
print(torch.cuda.get_device_name(), torch.__version__)
a = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
b = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
for _ in range(3):
    a @ b
torch.cuda.synchronize()
s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
s.record()
for _ in range(20):
    a @ b
e.record(); torch.cuda.synchronize()
ms = s.elapsed_time(e) / 20
print(f"bf16 8192^3 matmul: {ms:.3f} ms, {2 * 8192**3 / ms / 1e9:.0f} TFLOP/s")
x = torch.empty(2**30, dtype=torch.uint8, device=dev); y = torch.empty_like(x)
y.copy_(x); torch.cuda.synchronize()
s.record()
for _ in range(20):
    y.copy_(x)
e.record(); torch.cuda.synchronize()
ms = s.elapsed_time(e) / 20
print(f"copy 1 GiB: {ms:.3f} ms, {2 * 2**30 / ms / 1e9:.2f} TB/s (read + write)")
try:
    import pynvml
    pynvml.nvmlInit()
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    try:
        mig = pynvml.nvmlDeviceGetMigMode(h)[0]
    except Exception as err:
        mig = f"n/a ({type(err).__name__})"
    print("MIG mode", mig)
    q, k, v = (torch.randn(8, 16, 1024, 64, device=dev, dtype=torch.bfloat16) for _ in range(3))
    from torch.nn.attention import SDPBackend, sdpa_kernel
    cases = {"gemm": lambda: a @ b}
    def cudnn():
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    cases["sdpa_cudnn blog"] = cudnn
    for name, call in cases.items():
        call(); torch.cuda.synchronize()
        n, t0 = 0, time.perf_counter()
        e0 = pynvml.nvmlDeviceGetTotalEnergyConsumption(h)
        while time.perf_counter() - t0 < 1.5:
            for _ in range(50):
                call()
            n += 50
            torch.cuda.synchronize()
        e1 = pynvml.nvmlDeviceGetTotalEnergyConsumption(h)
        wall = time.perf_counter() - t0
        joules = (e1 - e0) / 1000
        print(f"{name}: {n} calls in {wall:.2f} s, counter {e0} -> {e1} mJ: {joules:.1f} J, {joules / n * 1000:.3f} mJ/call, "
              f"{joules / wall:.0f} W")
except Exception as err:
    print("NVML:", type(err).__name__, err)
