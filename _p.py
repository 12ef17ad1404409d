import time
import torch, gradio
t=time.perf_counter(); import triton; print("triton", time.perf_counter()-t)
t=time.perf_counter(); import matplotlib.pyplot; print("mpl", time.perf_counter()-t)
t=time.perf_counter(); import profiling.session; print("session", time.perf_counter()-t)
from profiling.replay import recorded_runs, recorded_sweeps
t=time.perf_counter(); recorded_runs("h200-torch2.11"); print("runs", time.perf_counter()-t)
t=time.perf_counter(); recorded_sweeps("h200-torch2.11"); print("sweeps", time.perf_counter()-t)
from profiling.environment import detect
t=time.perf_counter(); detect(); print("detect", time.perf_counter()-t)
t=time.perf_counter(); import app; print("app rest", time.perf_counter()-t)
