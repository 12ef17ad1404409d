# Everything one short GPU lease can hold (issue 29), each part bounded so the rest still runs, output under $OUT:
#   1. bench/h200/batch_check.py: batched samples against one sample a park, each against a bare loop (~2-3 min);
#   2. bench/h200/host_cost_check.py: a call's host cost in its back-to-back loop against behind a parked GPU;
#   3. bench/latency.py --quick --api-only --starts 1: the table through the API (gradio from wh/);
#   4. the GPU's live tests, with TESTS=1;
# with PARK_LOG=1, step 3 also logs every timing batch to $OUT/tlog.jsonl (bench/h200/park_log/sitecustomize.py).
#     bash bench/h200/one_call.sh
export PYTHONUNBUFFERED=1
OUT=${OUT:-.}
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv,noheader
if [ -d wh ]; then python3 -m pip install -q --no-index --no-deps $(ls wh/*.whl | grep -v hf_xet) 2>&1 | tail -2; fi
OUT=$OUT timeout 130 python3 bench/h200/batch_check.py > $OUT/batch_check.log 2>&1; tail -20 $OUT/batch_check.log
OUT=$OUT timeout 80 python3 bench/h200/host_cost_check.py > $OUT/host_cost_check.log 2>&1; tail -26 $OUT/host_cost_check.log
[ "$PARK_LOG" = 1 ] && export TLOG=$OUT/tlog.jsonl PYTHONPATH=bench/h200/park_log
OUT=$OUT timeout 170 python3 bench/latency.py --quick --api-only --starts 1 > $OUT/latency.txt 2>$OUT/latency_stderr.txt
unset TLOG PYTHONPATH
tail -16 $OUT/latency.txt; tail -3 $OUT/latency_stderr.txt
[ "$TESTS" = 1 ] && timeout 60 python3 -m pytest -o addopts=-ra -q -p no:cacheprovider tests/test_gpu_live.py 2>&1 | tail -8
