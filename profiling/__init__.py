"""The profiling core: workload, measurement, trace parsing, explanation and reports.

Importable without gradio, so a bare GPU machine can run it.
"""
import os

# Kineto (the profiler's C++ side) logs every session to stderr; 6 is above its highest level (USDT = 5).
os.environ.setdefault("KINETO_LOG_LEVEL", "6")
