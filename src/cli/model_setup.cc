#include "cli/model_setup.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

namespace tediserve::cli {

std::string DefaultModelDir() {
  namespace fs = std::filesystem;
  // Next to the binary's source tree when run from a build folder, else the working dir.
  for (const fs::path& p : {fs::path(TEDI_SOURCE_DIR) / "models/tiny-llada", fs::path("models/tiny-llada")})
    if (fs::exists(p / "config.json")) return p.string();
  return "models/tiny-llada";
}

StatusOr<ModelBundle> LoadBundle(const std::string& dir) {
  ModelBundle b;
  ASSIGN_OR_RETURN(engine::LoadedModel m, engine::LoadModel(dir));
  b.model = std::make_shared<const engine::LoadedModel>(std::move(m));
  const std::string tok_path = (std::filesystem::path(dir) / "tokenizer.json").string();
  ASSIGN_OR_RETURN(engine::Tokenizer tok, engine::Tokenizer::FromFile(tok_path));
  b.tokenizer = std::make_unique<engine::Tokenizer>(std::move(tok));
  const engine::GenerationDefaults defaults = engine::ReadGenerationDefaults(dir);
  b.default_gen_length = defaults.gen_length;
  b.default_block_size = defaults.block_size;
  return b;
}

StatusOr<Lengths> ResolveLengths(const std::optional<int>& gen, const std::optional<int>& block, int default_gen,
                                 int default_block) {
  if (gen && *gen <= 0) return InvalidArgument("gen length must be > 0, got " + std::to_string(*gen));
  if (block && *block <= 0) return InvalidArgument("block size must be > 0, got " + std::to_string(*block));
  return Lengths{gen.value_or(default_gen), block.value_or(default_block)};
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
