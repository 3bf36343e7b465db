#!/usr/bin/env bash
# Writes a random-weight checkpoint of LLaDA-8B's exact shapes in its published layout
# (GSAI-ML/LLaDA-8B-Instruct's config.json, bf16 weights in 6 shards of <= 3 GB,
# model.safetensors.index.json) into DIR, runs the CPU engine on it and prints: load time,
# resident memory (RSS), the latency of a 1024-token recompute step and of cache steps, and
# their FLOP rate against the sgemm peak on the same GEMM shapes measured in the same run.
# Not part of CI: it needs ~16 GB of disk and ~17 GB of RAM and runs for minutes.
#
#   tools/bench_8b.sh DIR [--keep] [--tediserve PATH] [--preset llada-8b|dream-7b] [-- BENCH FLAGS...]
#
# DIR must not exist or be empty; it is deleted at the end unless --keep. The tediserve binary
# defaults to build/tediserve (set --tediserve for another build folder). Flags after `--` go
# to `tediserve bench --large` (e.g. --tp 2, --recompute-reps 1, --cache-reps 5, --json F).
set -euo pipefail

usage() { sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
[[ $# -ge 1 ]] || usage
dir=$1; shift
keep=0
bin="$(cd "$(dirname "$0")/.." && pwd)/build/tediserve"
preset=llada-8b
bench_flags=()
while [[ $# -gt 0 ]]; do
  case $1 in
    --keep) keep=1 ;;
    --tediserve) bin=$2; shift ;;
    --preset) preset=$2; shift ;;
    --) shift; bench_flags=("$@"); break ;;
    *) echo "error: unknown flag $1" >&2; usage ;;
  esac
  shift
done
[[ -x $bin ]] || { echo "error: $bin is not an executable (build it, or pass --tediserve)" >&2; exit 2; }
if [[ -e $dir && -n "$(ls -A "$dir" 2>/dev/null)" ]]; then
  echo "error: $dir exists and is not empty" >&2
  exit 2
fi
cleanup() { if [[ $keep == 0 ]]; then rm -rf -- "$dir"; echo "removed $dir"; fi; }
trap cleanup EXIT

echo "== writing the checkpoint ($preset, bf16) into $dir"
/usr/bin/time -f "make-checkpoint: %e s wall, max RSS %M KB" "$bin" make-checkpoint --preset "$preset" --out "$dir"
du -sh "$dir"
ls -l "$dir"

echo "== running it"
/usr/bin/time -f "bench: %e s wall, max RSS %M KB" \
  "$bin" bench --large --model "$dir" --step-tokens 1024 "${bench_flags[@]}"
