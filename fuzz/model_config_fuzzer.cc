// A model's config.json: ModelConfig::FromJson, then what LoadModel derives from an accepted
// config before loading (the "tediserve" generation defaults and the memory estimate).
#include <nlohmann/json.hpp>

#include "engine/model_config.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tediserve;
  const std::string text(fuzz::AsText(data, size));
  StatusOr<engine::ModelConfig> config = engine::ModelConfig::FromJson(text);
  if (!config.ok()) return 0;
  if (!config->Validate().ok()) __builtin_trap();  // FromJson promises a validated config
  (void)engine::CheckModelFitsMemory(*config, uint64_t{1} << 30);
  // FromJson accepted it, so it is valid JSON within the depth bound.
  const nlohmann::json j = nlohmann::json::parse(text);
  StatusOr<engine::GenerationDefaults> g = engine::ParseGenerationDefaults(j, *config);
  if (g.ok() && (g->block_size < 1 || g->gen_length < g->block_size || g->gen_length % g->block_size != 0 ||
                 g->gen_length >= config->max_seq_len))
    __builtin_trap();  // the defaults it accepts must be usable
  return 0;
}
