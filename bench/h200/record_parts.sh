# On the lent H200: record the named parts of the recording (python -m profiling record --part ...) into a copy of
# profiling/recorded/h200-torch2.11, each in place, and bring the folder back as $OUT/rec.tar.gz (untar it over the
# recording here). A part is skipped when less than its time is left of the call's 10 minutes (BUDGET s, 560 unless
# set: less when the call ran something first).
#   bash bench/h200/record_parts.sh decode cold
# The serving engines (fa3, cudnn_fe, flashinfer) are recorded with the rest where .whl/engines.tar.xz travels
# (bench/h200/engines_setup.sh); FlashAttention-4 where fa4_parts.sh installed it first. A part is one session:
# record it with every library it names installed, or its absent variants are kept as refused.
export PYTHONUNBUFFERED=1
[ -f .whl/engines.tar.xz ] && . bench/h200/engines_setup.sh .whl
set -o pipefail
rec=/tmp/rec
[ -d $rec ] || cp -r profiling/recorded/h200-torch2.11 $rec
declare -A need=([matrix]=200 [cold]=200 [graph]=200 [sweeps]=220 [decode]=220 [decode_timing]=120 [packed]=90 [packed_unequal]=60 [packed_timing]=150 [unequal_timing]=40)
for part in "$@"; do
  left=$((${BUDGET:-560} - SECONDS))
  if [ "$left" -lt "${need[$part]:-200}" ]; then echo "skipped $part: ${left} s left"; continue; fi
  timeout $((left - 20)) python3 -m profiling record --out $rec --part "$part" > "$OUT/record_$part.log" 2>&1
  echo "$part: rc=$? after $SECONDS s"; grep -E "^part |Traceback|Error" "$OUT/record_$part.log" | head -5
done
(cd $rec && tar czf "$OUT/rec.tar.gz" runs.json.gz sweeps.json.gz traces)
ls -la "$OUT"
