# On the lent GPU: record the named parts of the recording (python -m profiling record --part ...) into a copy of
# this GPU's recording, profiling/recorded/<h200|h100>-torch<version> (begun empty where there is none: never two GPUs
# in one recording), each in place, and bring the folder back as $OUT/rec-<name>.tar.gz (untar it into that folder
# here). The parts share the call's 10 minutes (BUDGET s, 560 unless set: less when the call ran something
# first): each is told its deadline (--until) and stops between two workloads when the next would not fit, saying
# the --start that goes on; PART@N begins the part at its workload N (a later call going on).
#   bash bench/h200/record_parts.sh decode cold matrix@9
# FlashAttention-4 and the serving engines (fa3, cudnn_fe, flashinfer) are recorded with the rest where
# site_parts.sh installed them first (or .whl/engines.tar.xz travels: bench/h200/engines_setup.sh). A part is one
# session: record it with every library it names installed, or its absent variants are kept as refused.
export PYTHONUNBUFFERED=1
[ -f .whl/engines.tar.xz ] && . bench/h200/engines_setup.sh .whl
set -o pipefail
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
case "$gpu" in *H200*) kind=h200 ;; *H100*) kind=h100 ;; *) echo "no recording is kept for a $gpu"; exit 1 ;; esac
name=$kind-torch$(python3 -c "import torch; print('.'.join(torch.__version__.split('+')[0].split('.')[:2]))")
rec=/tmp/rec-$name
[ -d $rec ] || { mkdir -p $rec; [ -d profiling/recorded/$name ] && cp -r profiling/recorded/$name/. $rec/; }
echo "recording into $name ($gpu)"
for arg in "$@"; do
  part=${arg%@*}; start=0; [ "$arg" != "$part" ] && start=${arg#*@}
  left=$((${BUDGET:-560} - SECONDS))
  if [ "$left" -lt 60 ]; then echo "skipped $arg: ${left} s left"; continue; fi
  timeout $((left - 5)) python3 -m profiling record --out $rec --part "$part" --start "$start" --until $((left - 45)) \
    > "$OUT/record_$part.log" 2>&1
  echo "$arg: rc=$? after $SECONDS s"; grep -E "^part |stopped|Traceback|Error" "$OUT/record_$part.log" | head -5
done
(cd $rec && tar czf "$OUT/rec-$name.tar.gz" $(ls -d runs.json.gz sweeps.json.gz counters.json.gz traces 2>/dev/null))
ls -la "$OUT"
