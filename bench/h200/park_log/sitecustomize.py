# Diagnostic, not the app: log each timing batch (`profiling.timing._sample`) and each `time_gpu` to $TLOG as JSON lines,
# once the module is imported (an import hook: no thread, nothing imported early). Used for park_stalls_h100.txt:
#     TLOG=$OUT/tlog.jsonl PYTHONPATH=bench/h200/park_log python3 bench/latency.py --quick --api-only --starts 1
import importlib.abc, importlib.util, json, os, sys, time, threading
LOG = os.environ.get("TLOG")

def patch(mod):
    real_sample, real_time_gpu = mod._sample, mod.time_gpu
    def _sample(batch):
        lead = mod._lead_s(batch)
        t0 = time.perf_counter()
        again = real_sample(batch)
        rec = dict(pid=os.getpid(), t=time.time(), n=len(batch), lead_ms=lead * 1e3, wall_ms=(time.perf_counter() - t0) * 1e3,
                   again=len(again), issue_us=sorted({round(q.park.issue_s * 1e6, 1) for q in batch}),
                   threads=threading.active_count())
        with open(LOG, "a") as f:
            f.write(json.dumps(rec) + "\n")
        return again
    def time_gpu(subjects, check, flush=None):
        t0 = time.perf_counter()
        real_time_gpu(subjects, check, flush)
        with open(LOG, "a") as f:
            f.write(json.dumps(dict(pid=os.getpid(), t=time.time(), time_gpu_ms=(time.perf_counter() - t0) * 1e3,
                                    variants=[s.run.variant for s in subjects])) + "\n")
    mod._sample, mod.time_gpu = _sample, time_gpu

class Hook(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != "profiling.timing":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        sys.meta_path.insert(0, self)
        real_exec = spec.loader.exec_module
        def exec_module(module):
            real_exec(module)
            patch(module)
        spec.loader.exec_module = exec_module
        return spec

if LOG:
    sys.meta_path.insert(0, Hook())
