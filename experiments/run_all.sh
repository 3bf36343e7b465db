#!/usr/bin/env bash
# Runs every simulated experiment of docs/experiments.md (about 5 minutes on one core), and
# with --frontier also the frontier experiments (frontier_*.yaml: about 40 minutes more).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-build/tediserve}
for e in e1_realworld e2_gsm8k_rps e2_gsm8k_slo e3_ablation e4_predictor e5_input_length e5_output_length e6_faults e7_step_time_error e8_classes_priority overload_cpu_live; do
  echo "== $e"
  "$BIN" simulate "experiments/$e.yaml" --quiet
done
if [[ ${1:-} == --frontier ]]; then
  for e in frontier_e2 frontier_e3 frontier_e1 frontier_e5_input frontier_e5_output; do
    echo "== $e"
    "$BIN" simulate "experiments/$e.yaml" --quiet
  done
fi
