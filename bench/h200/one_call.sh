# Everything one short GPU lease can hold (issue 29), each part bounded so the rest still runs, output under $OUT, the
# most wanted first (~8 min in all):
#   1. bench/latency.py --quick --api-only --starts 3: the table through the API (gradio from wh/), the start
#      now without gradio's stub writing and with one build of its web app; first, whether the host's libraries have
#      their bytecode compiled;
#   2. the GPU's live tests, with TESTS=1;
#   2b. with PROBE=1, bench/h200/nested_first_probe.py: the sdpa_nested warm-up step's phases and samples (~20 s);
#   3. bench/h200/host_park_check.py (not with PARK=0): the host cost with the park from the measured issue against the
#      old guess + 2 ms, four times as long, and 2 ms longer; whether any park ended before its calls were issued
#      (6 repeats, each arm first in turn, a first one discarded; ~1 min);
# wh/ must hold pytz and tzdata too: the lent host's Python has neither (gradio imports pytz).
# With PARK_LOG=1, step 1 also logs every timing batch to $OUT/tlog.jsonl (bench/h200/park_log/sitecustomize.py);
# with COMPILE=1, torch's bytecode is compiled first, as pip does at install (a Space's image has it; the lent host's
# torch has none, and PYTHONDONTWRITEBYTECODE=1 there keeps each start compiling it again).
#     bash bench/h200/one_call.sh
export PYTHONUNBUFFERED=1
OUT=${OUT:-.}
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv,noheader
if [ -d wh ]; then python3 -m pip install -q --no-index --no-deps $(ls wh/*.whl | grep -v hf_xet) 2>&1 | tail -2; fi
# is the host's import slow because nothing is compiled ahead (no __pycache__, or bytecode writing off)?
python3 -c "import os, sys, importlib.util as u; print('PYTHONDONTWRITEBYTECODE', os.environ.get('PYTHONDONTWRITEBYTECODE'), 'dont_write', sys.dont_write_bytecode); [print(m, os.path.isdir(os.path.join(os.path.dirname(u.find_spec(m).origin), '__pycache__'))) for m in ('torch', 'gradio', 'fastapi')]"
if [ "$COMPILE" = 1 ]; then
  python3 -c "import compileall, importlib.util as u, os, time; t = time.perf_counter(); ok = compileall.compile_dir(os.path.dirname(u.find_spec('torch').origin), quiet=2, workers=0); print('compileall torch:', ok, round(time.perf_counter() - t, 1), 's')"
fi
[ "$PARK_LOG" = 1 ] && export TLOG=$OUT/tlog.jsonl PYTHONPATH=bench/h200/park_log
OUT=$OUT timeout 330 python3 bench/latency.py --quick --api-only --starts 3 > $OUT/latency.txt 2>$OUT/latency_stderr.txt
unset TLOG PYTHONPATH
tail -16 $OUT/latency.txt; tail -3 $OUT/latency_stderr.txt
[ "$TESTS" = 1 ] && timeout 90 python3 -m pytest -o addopts=-ra -q -p no:cacheprovider tests/test_gpu_live.py 2>&1 | tail -8
[ "$PROBE" = 1 ] && timeout 90 python3 bench/h200/nested_first_probe.py 2>&1 | grep -v Warning | tail -8 | tee $OUT/nested_probe.txt
# last, what matters least if the lease runs short
[ "$PARK" != 0 ] && { OUT=$OUT timeout 170 python3 bench/h200/host_park_check.py > $OUT/host_park_check.log 2>&1; tail -14 $OUT/host_park_check.log; }
