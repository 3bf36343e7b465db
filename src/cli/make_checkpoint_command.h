// `tediserve make-checkpoint`: writes a random-weight checkpoint folder in a published
// layout (config.json as published, sharded *.safetensors, model.safetensors.index.json), for
// benchmarks and tests at real model shapes (tools/bench_8b.sh). Weights are streamed to
// disk: an 8B model never sits in memory.
#pragma once

#include <cstdint>
#include <string>

#include <CLI/CLI.hpp>

namespace tediserve::cli {

struct MakeCheckpointArgs {
  std::string preset = "llada-8b";  // llada-8b | dream-7b | llada-test | dream-test
  std::string out_dir;
  std::string dtype = "bf16";       // bf16 | f16 | f32
  int layers = 0;                   // 0: the preset's
  double shard_gb = 3.0;            // largest shard, in GB (1e9 bytes)
  uint64_t seed = 1;
  bool force = false;               // write into a non-empty folder
};

CLI::App* AddMakeCheckpointCommand(CLI::App& app, MakeCheckpointArgs* args);
int RunMakeCheckpoint(const MakeCheckpointArgs& args);

}  // namespace tediserve::cli
