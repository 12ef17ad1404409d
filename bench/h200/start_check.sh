# On the H200 (issues 24 and 29), after the start-up changes of 2026-12-05 (the profiler's one-off start without
# torch._inductor; the warm-up started once the server answers): gradio from the carried wheels (wh/, nothing
# downloaded; hf_xet left out: only huggingface_hub's Xet downloads use it), then
#   1. bench/h200/quiet_log_check.py: app.py's log through two live comparisons and a live sweep;
#   2. bench/latency.py --quick --starts 3: server start to first answer (3 starts), replay, live pairs, sweep.
#
#     bash bench/h200/start_check.sh        # ~6 min; $OUT/quiet_log.txt, $OUT/latency.txt
export PYTHONUNBUFFERED=1
OUT=${OUT:-.}
if [ -d wh ]; then
    python3 -m pip install -q --no-index --no-deps $(ls wh/*.whl | grep -v hf_xet) 2>&1 | tail -2
fi
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv,noheader
python3 -c "import torch, gradio; print('torch', torch.__version__, 'gradio', gradio.__version__)"
OUT=$OUT timeout 200 python3 bench/h200/quiet_log_check.py 2>&1 | tee $OUT/quiet_log.txt | tail -12
cp $OUT/app.log $OUT/quiet_log_app.log 2>/dev/null
OUT=$OUT timeout 360 python3 bench/latency.py --quick --starts 3 2>$OUT/latency_stderr.txt | tail -40 \
    || tail -20 $OUT/latency_stderr.txt
