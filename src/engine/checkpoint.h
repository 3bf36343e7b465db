// The tensors of a Hugging Face model folder: one model.safetensors, several shards found by
// globbing *.safetensors, or the shards a model.safetensors.index.json names (its
// "weight_map" from tensor name to shard file). Every shard is memory-mapped (SafetensorsFile),
// so opening an 8B checkpoint reads only the headers.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "engine/safetensors.h"

namespace tediserve::engine {

inline constexpr const char* kCheckpointIndexFile = "model.safetensors.index.json";
// An index is a few MB at most (LLaDA-8B's is 25 KB); the bound keeps a corrupt file cheap.
inline constexpr std::uint64_t kMaxIndexBytes = 64ull << 20;
// More tensors than any real model has (a 405B model has a few thousand).
inline constexpr size_t kMaxIndexEntries = 1u << 20;

struct CheckpointIndex {
  std::map<std::string, std::string> weight_map;  // tensor name -> shard file name
  std::optional<std::uint64_t> total_size;        // metadata.total_size, when present
  // The distinct shard files, sorted.
  std::vector<std::string> shards() const;
};

// Parses the text of a model.safetensors.index.json. The top level is an object with a
// "weight_map" object of at least one entry, each value a plain file name ending in
// ".safetensors" (no folder part, no "..": a shard must lie in the model folder), and an
// optional "metadata" object whose "total_size", when present, is a non-negative integer;
// other keys are ignored. Anything else is kInvalidArgument starting with `where` and naming
// the key or tensor.
StatusOr<CheckpointIndex> ParseCheckpointIndex(std::string_view text, const std::string& where);

class Checkpoint {
 public:
  // With MODEL_DIR/model.safetensors.index.json: opens exactly the shards it names and
  // checks the map against them: a shard that does not exist is kNotFound naming the shard
  // and a tensor mapped to it; a tensor the index maps to a shard that does not hold it, or a
  // tensor that a shard holds but the index maps to another shard, is kDataLoss. Shards
  // present in the folder but not named by the index are not opened. Without an index: every
  // *.safetensors file of the folder (a tensor in two of them is kDataLoss). A shard that
  // fails SafetensorsFile::Open (truncated, corrupt header) fails the whole open.
  static StatusOr<Checkpoint> Open(const std::string& dir);

  struct Entry {
    std::shared_ptr<const SafetensorsFile> file;
    const TensorInfo* info = nullptr;
  };
  // The tensor, or nullopt.
  std::optional<Entry> Find(const std::string& name) const;
  bool Has(const std::string& name) const { return where_.count(name) != 0; }

  const std::string& dir() const { return dir_; }
  bool has_index() const { return has_index_; }
  const std::vector<std::shared_ptr<const SafetensorsFile>>& files() const { return files_; }

 private:
  std::string dir_;
  bool has_index_ = false;
  std::vector<std::shared_ptr<const SafetensorsFile>> files_;
  std::unordered_map<std::string, size_t> where_;  // tensor -> index into files_
};

}  // namespace tediserve::engine
