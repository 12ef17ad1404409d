# On the H200 (issue 29): where a request's time goes, through the API and the front door, and what a cold compile
# cache costs. gradio's wheels come from a carried folder wh/ (nothing is downloaded; installed without resolving
# dependencies, so that hf_xet, which only huggingface_hub's Xet downloads use, may stay out of the carried tree):
#
#     bash bench/h200/latency_check.sh        # ~5 min; writes $OUT/latency.txt, $OUT/latency_cache.txt
#
# 1. bench/latency.py (full): server start to its first replayed answer (3 starts), a replay, the first live fused
#    comparison (flash vs cuDNN, the blog's workload; the server's start-up warm-up running meanwhile), the same warm,
#    a warm naive pair, a live sweep of 9 lengths (128 … 32,768); then the front door in a fresh process, cold, and
#    in another after the start-up warm-up: the first live comparison then.
# 2. The compile caches: flex and FA4 (if installed) through the command line in a fresh process with empty caches,
#    then again in another with the caches the first filled: each first call's time, cold and warm.
export PYTHONUNBUFFERED=1
OUT=${OUT:-.}
if [ -d wh ]; then
    python3 -m pip install -q --no-index --no-deps wh/*.whl 2>&1 | tail -2
fi
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv,noheader
python3 -c "import torch, gradio; print('torch', torch.__version__, 'gradio', gradio.__version__)"

OUT=$OUT python3 bench/latency.py 2>$OUT/latency_stderr.txt || tail -20 $OUT/latency_stderr.txt

cache=$(mktemp -d)
for turn in cold warm; do
    TORCHINDUCTOR_CACHE_DIR=$cache/inductor FLASH_ATTENTION_CUTE_DSL_CACHE_DIR=$cache/fa4 \
    FLASH_ATTENTION_CUTE_DSL_CACHE_ENABLED=1 /usr/bin/time -f "%e" -o $cache/wall_$turn \
        python3 -m profiling compare flex fa4 --json $cache/$turn.json >$cache/$turn.txt 2>&1
    python3 - "$cache/$turn.json" "$turn" "$(cat $cache/wall_$turn)" <<'EOF' | tee -a $OUT/latency_cache.txt
import json, sys
path, turn, wall = sys.argv[1:]
try:
    runs = json.load(open(path))
except (OSError, ValueError) as error:
    print(f"{turn} cache: no result ({error})")
    raise SystemExit
for side in ("a", "b"):
    run = runs[side]
    first = run.get("first_call_ms")
    said = f"first call {first / 1000:.2f} s" if first is not None else f"{run['status']}: {run.get('reason')}"
    print(f"{turn} cache: {run['variant']:<5} {said}  (process wall {wall} s)")
EOF
done
du -sh $cache/inductor $cache/fa4 2>/dev/null | tee -a $OUT/latency_cache.txt
rm -rf $cache
