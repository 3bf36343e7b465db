#include "cli/model_setup.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/input.h"
#include "common/machine.h"

namespace tediserve::cli {

std::string DefaultModelDir(const std::string& name) {
  namespace fs = std::filesystem;
  // Next to the binary's source tree when run from a build folder, else the working dir.
  for (const fs::path& p : {fs::path(TEDI_SOURCE_DIR) / "models" / name, fs::path("models") / name})
    if (fs::exists(p / "config.json")) return p.string();
  return "models/" + name;
}

StatusOr<ModelBundle> LoadBundle(const std::string& dir) {
  ModelBundle b;
  ASSIGN_OR_RETURN(engine::LoadedModel m, engine::LoadModel(dir));
  b.model = std::make_shared<const engine::LoadedModel>(std::move(m));
  const std::string tok_path = (std::filesystem::path(dir) / "tokenizer.json").string();
  ASSIGN_OR_RETURN(engine::Tokenizer tok, engine::Tokenizer::FromFile(tok_path));
  // Token ids index the embedding: a tokenizer for a larger vocabulary than the model's
  // would turn text into ids the model has no rows for.
  if (tok.vocab_size() > b.model->config.vocab_size)
    return InvalidArgument(SanitizeUtf8(tok_path) + ": token ids go up to " + std::to_string(tok.vocab_size() - 1) +
                           " but config.json's vocab_size is " + std::to_string(b.model->config.vocab_size) +
                           "; the tokenizer does not belong to this model");
  b.tokenizer = std::make_unique<engine::Tokenizer>(std::move(tok));
  b.default_gen_length = b.model->generation.gen_length;  // validated by LoadModel
  b.default_block_size = b.model->generation.block_size;
  return b;
}

StatusOr<Lengths> ResolveLengths(const std::optional<int>& gen, const std::optional<int>& block, int default_gen,
                                 int default_block) {
  const int max = engine::kMaxSeqLen;
  if (gen && (*gen <= 0 || *gen > max))
    return InvalidArgument("--gen-length must be in [1, " + std::to_string(max) + "], got " + std::to_string(*gen));
  if (block && (*block <= 0 || *block > max))
    return InvalidArgument("--block-size must be in [1, " + std::to_string(max) + "], got " + std::to_string(*block));
  const Lengths l{gen.value_or(default_gen), block.value_or(default_block)};
  if (l.gen_length <= 0 || l.gen_length > max || l.block_size <= 0 || l.block_size > max)
    return InvalidArgument("gen length " + std::to_string(l.gen_length) + " / block size " +
                           std::to_string(l.block_size) + " must be in [1, " + std::to_string(max) + "]");
  return l;
}

Status CheckBatchFits(const engine::LoadedModel& loaded, int64_t sequences, int64_t tokens_per_sequence,
                      const std::string& what) {
  const engine::ModelConfig& c = loaded.config;
  if (sequences < 1 || tokens_per_sequence < 1) return Status::Ok();
  // Doubles: the point is the order of magnitude, and nothing overflows.
  const double f = sizeof(float);
  const double kv_per_token = 2.0 * c.n_layers * c.n_kv_heads * c.head_dim * f;
  const double act_per_token =
      f * (3.0 * c.d_model + (c.n_heads + 2.0 * c.n_kv_heads) * c.head_dim + 2.0 * c.mlp_hidden + c.vocab_size);
  const double tokens = static_cast<double>(sequences) * static_cast<double>(tokens_per_sequence);
  const double scores = static_cast<double>(tokens_per_sequence) * static_cast<double>(tokens_per_sequence) * f;
  const double need = tokens * (kv_per_token + act_per_token) + scores;
  engine::ModelMemory mm = engine::EstimateModelMemory(c, loaded.mapped_bytes + loaded.owned_bytes);
  mm.kv_cache = 0;  // counted above, per request
  const double model = static_cast<double>(mm.total());
  const double usable = static_cast<double>(UsableMemoryBytes());
  if (need + model <= usable) return Status::Ok();
  return InvalidArgument(what + ": " + std::to_string(sequences) + " request(s) of " +
                         std::to_string(tokens_per_sequence) + " tokens need about " +
                         FormatBytes(need > 1.8e19 ? UINT64_MAX : static_cast<uint64_t>(need)) +
                         " next to the model's " + FormatBytes(static_cast<uint64_t>(model)) + ", more than the " +
                         FormatBytes(static_cast<uint64_t>(usable)) + " this process can use");
}

int ReportError(const Status& status) {
  std::cerr << "error: " << status.message() << "\n";
  return ExitCode(status);  // the one mapping (common/status.h)
}

Status OpenStepLog(const std::string& path, std::ofstream* out) {
  if (path.empty()) return Status::Ok();
  out->open(path);
  if (!*out) return IoError("cannot write step log " + path);
  return Status::Ok();
}

Status ValidateThreshold(double threshold) {
  if (!(threshold > 0.0 && threshold <= 1.0) || !std::isfinite(threshold))
    return InvalidArgument("threshold must be in (0, 1], got " + std::to_string(threshold));
  return Status::Ok();
}

}  // namespace tediserve::cli
