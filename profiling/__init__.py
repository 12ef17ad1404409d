"""The profiling core: workload, measurement, trace parsing, explanation and reports.

Importable without gradio, so a bare GPU machine can run it.
"""
import os

# Kineto (the profiler's C++ side) logs every session to stderr; 6 is above its highest level (USDT = 5).
os.environ.setdefault("KINETO_LOG_LEVEL", "6")
# Kineto leaves CUPTI attached after a session unless told to tear it down, and an attached CUPTI triples
# the host cost of every later launch (flash on the H200: 14.7 µs per call before a session, 42.8 after;
# 14.4 after with teardown). A profiler that changes what it measures next must clean up after itself.
os.environ.setdefault("TEARDOWN_CUPTI", "1")
