// What every command needs before it runs: a loaded model folder, its tokenizer, the
// generation defaults recorded in its config.json, and an engine at the chosen TP degree.
#pragma once

#include <fstream>
#include <memory>
#include <optional>
#include <string>

#include "common/status.h"
#include "engine/decoder.h"
#include "engine/tokenizer.h"
#include "engine/weights.h"

namespace tediserve::cli {

// The bundled models: the tiny one (one block of 8; generate, eval, bench and the fast tests)
// and the multi-block one (8 blocks of 8; what `serve` and `bench-serve` use by default).
inline constexpr const char* kTinyModel = "tiny-llada";
inline constexpr const char* kServeModel = "tiny-llada-long";

// The folder of a bundled model, relative to the source tree or the working directory.
std::string DefaultModelDir(const std::string& name = kTinyModel);

struct ModelBundle {
  std::shared_ptr<const engine::LoadedModel> model;
  std::unique_ptr<engine::Tokenizer> tokenizer;
  int default_gen_length = 0;  // "tediserve": {"gen_length", "block_size"} in config.json,
  int default_block_size = 0;  // else 128 / 32
};

// Loads the model (LoadModel validates config.json, its "tediserve" defaults and the memory
// estimate) and its tokenizer.json, whose ids must lie inside the model's vocabulary.
StatusOr<ModelBundle> LoadBundle(const std::string& dir);

// The gen length and block size a command runs with: the flags when given (each in
// [1, engine::kMaxSeqLen]), else the given defaults.
struct Lengths {
  int gen_length = 0, block_size = 0;
};
StatusOr<Lengths> ResolveLengths(const std::optional<int>& gen, const std::optional<int>& block, int default_gen,
                                 int default_block);

// Checks that `sequences` requests of `tokens_per_sequence` tokens each (prompt + output)
// fit this process's memory next to the model: their KV buffers, one step's activations
// and logits over all of them, and the attention scores of the longest. InvalidArgument
// naming `what` (the flags to change) otherwise.
// The model's own share is its weights as loaded (mapped and owned bytes) plus the packed
// copy and RoPE tables EstimateModelMemory adds.
Status CheckBatchFits(const engine::LoadedModel& model, int64_t sequences, int64_t tokens_per_sequence,
                      const std::string& what);

// Opens `path` for a step log (JSONL) unless it is empty; an unwritable path is an error.
Status OpenStepLog(const std::string& path, std::ofstream* out);

// Prints "error: <message>" to stderr and returns the exit code for it: 2 for bad input
// (the caller's flags, files or model), 1 for a failure inside TeDiServe.
int ReportError(const Status& status);

// Checks a threshold from the command line: in (0, 1].
Status ValidateThreshold(double threshold);

}  // namespace tediserve::cli
