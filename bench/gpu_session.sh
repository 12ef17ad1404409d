set -x
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv
python3 -c "import torch; print(torch.__version__, torch.version.cuda, torch.backends.cudnn.version())"
export PYTHONUNBUFFERED=1
python3 -m profiling list 2>&1 | tail -12
time python3 -m profiling record --out $OUT/rec 2>&1 | tail -60
(cd $OUT/rec && tar czf ../rec.tar.gz runs.json traces && cd .. && rm -rf rec)
python3 bench/bench_compare.py 2>&1 | tee $OUT/bench.txt
python3 -m profiling compare naive sdpa_math --trace-dir /tmp/tt 2>&1 | head -70
