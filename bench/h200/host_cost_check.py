"""Would a call's host cost read the same from its back-to-back loop as from calls behind a parked GPU? On a GPU
(~1 min; issue 29: a live sweep's host figures were 3.9 s of its 9.4 s on the H200, most of it the parked calls of
its longest points, each a whole call the GPU then runs):

    python bench/h200/host_cost_check.py        # the table on stdout and in $OUT/host_cost_check.txt

For flash and cuDNN on the blog's workload at S = 1,024 ... 32,768, naive's forwards and steps, and host-bound calls
(S = 128, the GPU idle between them): the host's time to issue one call, read two ways
in alternating rounds: (a) as `timing.host_figures` reads it now, each call timed while the GPU is parked behind a
`torch.cuda._sleep`; (b) each call of a back-to-back loop timed as it is issued (the GPU busy with the calls before
it, never waiting on the host). For calls of a millisecond or more (GPU-bound beyond doubt, a loop of 2-10 calls:
far under CUDA's queue depth) the two should agree; if they do within the rounds' own spread, (b) would save the
parked calls and their park. The loop's first call (issued to an idle GPU) is shown apart. Nothing in the app changes
until this says so.
"""
from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402

from attention_variants import VARIANTS  # noqa: E402
from profiling.workload import Workload  # noqa: E402
from timing_check import call_of  # noqa: E402

OUT = Path(os.environ.get("OUT", "."))
CASES = [(k, s, "fwd") for k in ("sdpa_flash", "sdpa_cudnn") for s in (1024, 2048, 4096, 8192, 16384, 32768)] + \
    [(k, s, p) for k in ("naive", "naive_inplace") for s in (1024, 4096) for p in ("fwd", "fwd+bwd")] + \
    [("sdpa_flash", 1024, "fwd+bwd"), ("sdpa_cudnn", 1024, "fwd+bwd"), ("sdpa_math", 1024, "fwd")] + \
    [(k, 128, "fwd") for k in ("sdpa_flash", "sdpa_cudnn", "naive")]  # host-bound: the GPU idles between calls
ROUNDS, PARKED = 8, 2


def parked_issue_ms(call, calls: int) -> list[float]:
    torch.cuda.synchronize()
    torch.cuda._sleep(int(0.05 * 2e9))  # ~50 ms: far longer than the host takes to issue `calls`
    times = []
    for _ in range(calls):
        t0 = time.perf_counter()
        call()
        times.append((time.perf_counter() - t0) * 1e3)
    torch.cuda.synchronize()
    return times


def loop_issue_ms(call, calls: int) -> tuple[list[float], float]:
    torch.cuda.synchronize()
    times = []
    t0 = time.perf_counter()
    for _ in range(calls):
        t1 = time.perf_counter()
        call()
        times.append((time.perf_counter() - t1) * 1e3)
    torch.cuda.synchronize()
    return times, (time.perf_counter() - t0) * 1e3 / calls


def main() -> None:
    if not torch.cuda.is_available():
        raise SystemExit("needs a CUDA GPU")
    lines = [f"{torch.cuda.get_device_name()} · torch {torch.__version__}",
             f"{'variant':<11} {'S':>6} {'pass':<7} {'GPU ms':>8} {'parked µs':>10} {'in loop µs':>11} {'loop/parked':>11} {'first µs':>9} "
             f"{'spread µs':>10} {'parked calls cost s':>19}"]
    for key, s, passes in CASES:
        w = Workload.blog(seq_len=s, passes=passes)
        try:
            call = call_of(VARIANTS[key], w)
            for _ in range(3):
                call()
            parked, looped, paces, firsts = [], [], [], []
            loop = 4
            for _ in range(ROUNDS):  # alternating, so a drift of the host hits both
                parked += parked_issue_ms(call, PARKED)
                times, pace = loop_issue_ms(call, loop)
                loop = 4 if pace >= 1 else 10
                looped += times[1:]
                firsts.append(times[0])
                paces.append(pace)
            p, q = statistics.median(parked), statistics.median(looped)
            spread = statistics.quantiles(parked, n=4)[2] - statistics.quantiles(parked, n=4)[0]
            gpu = statistics.median(paces)
            lines.append(f"{key:<11} {s:>6} {passes:<7} {gpu:>8.3f} {p * 1e3:>10.1f} {q * 1e3:>11.1f} {q / p:>11.2f} {statistics.median(firsts) * 1e3:>9.1f} "
                         f"{spread * 1e3:>10.1f} {4 * PARKED * gpu / 1e3:>19.3f}")
        except Exception as error:  # one case's failure is printed; the rest go on
            lines.append(f"{key:<11} {s:>6} {passes:<7} failed: {str(error).splitlines()[0][:120]}")
        finally:
            torch.cuda.empty_cache()
        print(lines[-1], flush=True)
    (OUT / "host_cost_check.txt").write_text("\n".join(lines) + "\n")
    print("\n".join(lines[:2]))


if __name__ == "__main__":
    main()
