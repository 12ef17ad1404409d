# One call on the lent GPU: live GPU tests, re-record the variant matrix, the performance bench,
# and the blog workload's comparisons with their notes. Everything lands under $OUT.
# (To run only some steps: bash bench/gpu_session.sh tests|record|bench|notes|hostcost|batch ...)
export PYTHONUNBUFFERED=1
steps=${*:-tests record bench notes}
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv
for step in $steps; do case $step in
tests) if [ -d wh ]; then python3 -m pip install -q --no-index --no-deps wh/*.whl 2>&1 | tail -2; fi  # gradio, carried
       python3 -m pytest -q -p no:cacheprovider -o addopts=-ra tests/test_gpu_live.py tests/test_trace_h200.py \
         tests/test_latency.py tests/test_session.py tests/test_app.py tests/test_timing_modes.py \
         tests/test_measurement_cpu.py tests/test_cli.py 2>&1 | tee $OUT/pytest.txt | tail -15 ;;
record) python3 -m profiling record --out $OUT/rec > $OUT/record.txt 2>&1; tail -3 $OUT/record.txt
        (cd $OUT/rec && tar czf ../rec.tar.gz runs.json.gz sweeps.json.gz traces) && rm -rf $OUT/rec ;;
bench) python3 bench/bench_targets.py 2>&1 | tee $OUT/bench.txt ;;
hostcost) python3 bench/h200/host_cost_check.py 2>&1 | tail -30 ;;  # a call's host cost, parked vs in its loop
batch) python3 bench/h200/batch_check.py 2>&1 | tail -30 ;;  # rounds queued behind one park vs one each
notes) for pair in "naive naive_inplace" "sdpa_math sdpa_efficient" "sdpa_flash sdpa_cudnn" "sdpa_auto flex"; do
         set -- $pair
         /usr/bin/time -f "wall %e s (cold process)" python3 -m profiling compare $1 $2
       done > $OUT/notes.txt 2>&1
       grep -E "^(naive|sdpa|flex).*ms/fwd|wall .* s \(cold" $OUT/notes.txt ;;
esac; done
