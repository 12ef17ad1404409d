"""The app's endpoints on a GPU machine, end to end (needs gradio and gradio_client; no browser):

    python bench/gpu_app_check.py

1. a live comparison through /compare (flash vs cuDNN, the blog's workload): wall time and headline;
2. a live sweep through /sweep (flash vs cuDNN, 128…32768): wall time, points, headline;
3. a replay through /replay while a second live sweep holds the GPU's queue: the replay's wall time
   (target: a replay never waits for a live run).
"""
from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from conftest import free_port  # noqa: E402


def main() -> None:
    import app
    from gradio_client import Client
    from profiling.workload import Workload

    port = free_port()
    app.demo.launch(prevent_thread_lock=True, server_name="127.0.0.1", server_port=port, quiet=True, **app.LAUNCH)
    blog = Workload.blog()
    controls = dict(seq_len=blog.seq_len, heads=blog.heads, dtype=blog.dtype, batch=blog.batch,
                    head_dim=blog.head_dim, causal=blog.causal, rank=blog.rank)
    client = Client(f"http://127.0.0.1:{port}/", verbose=False)
    print(f"{app.ENV.summary()}")

    t0 = time.perf_counter()
    answer = client.predict(source="live", a="sdpa_flash", b="sdpa_cudnn", **controls, api_name="/compare")
    print(f"\n1. live /compare: {time.perf_counter() - t0:.1f} s wall (a cold process)\n   {answer['verdict']}")
    t0 = time.perf_counter()
    answer = client.predict(source="live", a="sdpa_flash", b="sdpa_cudnn", **controls, api_name="/compare")
    print(f"   again, warm: {time.perf_counter() - t0:.1f} s")

    lengths = ",".join(str(128 * 2**i) for i in range(9))
    t0 = time.perf_counter()
    swept = client.predict(source="live", a="sdpa_flash", b="sdpa_cudnn", **controls, seq_lens=lengths,
                           api_name="/sweep")
    print(f"\n2. live /sweep over {lengths}: {time.perf_counter() - t0:.1f} s wall, {len(swept['points'])} points, "
          f"statuses {sorted({p['status'] for p in swept['points']})}\n   {swept['headline']}")
    for note in swept["notes"][:3]:
        print(f"   - {note['title']}")

    held = {}

    def hold():  # a second live sweep holds the GPU's queue meanwhile
        t = time.perf_counter()
        other = Client(f"http://127.0.0.1:{port}/", verbose=False)
        other.predict(source="live", a="naive", b="sdpa_math", **controls, seq_lens="1024,2048,4096,8192",
                      api_name="/sweep")
        held["s"] = time.perf_counter() - t

    thread = threading.Thread(target=hold)
    thread.start()
    time.sleep(1.0)
    t0 = time.perf_counter()
    replayed = client.predict(source="h200-torch2.11", a="sdpa_flash", b="sdpa_cudnn", **controls, api_name="/replay")
    took = time.perf_counter() - t0
    thread.join()
    print(f"\n3. /replay while a live sweep held the GPU ({held.get('s', 0):.1f} s): {took:.2f} s wall\n"
          f"   {replayed['verdict']}")
    app.demo.close()


if __name__ == "__main__":
    main()
