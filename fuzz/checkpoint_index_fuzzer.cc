// model.safetensors.index.json: the fuzzer's bytes as the index of a folder that holds two
// small real shards, opened with Checkpoint::Open (ParseCheckpointIndex, then the shards it
// names checked against the map). A clean error is the expected outcome for most inputs;
// whatever opens must answer lookups for every tensor the index maps.
#include <filesystem>

#include <nlohmann/json.hpp>

#include "engine/checkpoint.h"
#include "engine/safetensors.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tediserve;
  namespace fs = std::filesystem;
  const fs::path dir = fuzz::ScratchDir() / "ckpt";
  static const bool shards_written = [&dir] {
    fs::create_directories(dir);
    using engine::DType;
    const bool a = engine::WriteSafetensors((dir / "model-00001-of-00002.safetensors").string(),
                                            {{"w", DType::kBF16, {2, 3}, {1, 2, 3, 4, 5, 6}, {}},
                                             {"n", DType::kF32, {3}, {1, 1, 1}, {}}})
                       .ok();
    const bool b = engine::WriteSafetensors((dir / "model-00002-of-00002.safetensors").string(),
                                            {{"h", DType::kF16, {3, 2}, {0, 1, 0, 1, 0, 1}, {}}})
                       .ok();
    return a && b;
  }();
  if (!shards_written) std::abort();  // the harness, not the parser
  fuzz::WriteInput(data, size, "ckpt/model.safetensors.index.json");
  StatusOr<engine::Checkpoint> ckpt = engine::Checkpoint::Open(dir.string());
  // The parser on its own, from the text (the same bytes).
  StatusOr<engine::CheckpointIndex> index =
      engine::ParseCheckpointIndex(fuzz::AsText(data, size), "model.safetensors.index.json");
  // An index that parses may still fail Open (a shard it names is missing, a tensor absent),
  // but Open cannot succeed on one that does not parse.
  if (ckpt.ok() && !index.ok()) __builtin_trap();
  if (!ckpt.ok()) return 0;
  for (const auto& [tensor, shard] : index->weight_map) {
    const auto e = ckpt->Find(tensor);
    if (!e || e->info == nullptr || e->file == nullptr) __builtin_trap();  // Open checked every entry
    if (!e->file->RawData(tensor).ok()) __builtin_trap();
  }
  return 0;
}
