#include "engine/checkpoint.h"

#include <algorithm>
#include <filesystem>
#include <set>

#include <nlohmann/json.hpp>

#include "common/input.h"
#include "common/json_keys.h"

namespace tediserve::engine {

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

std::string Shown(std::string_view s) { return SanitizeUtf8(std::string(s.substr(0, 200))); }

// A shard must be a plain file name inside the model folder.
Status CheckShardName(const std::string& tensor, const std::string& file) {
  const std::string where = "weight_map['" + Shown(tensor) + "'] = '" + Shown(file) + "'";
  if (file.empty()) return InvalidArgument(where + ": empty file name");
  if (file.size() > 255) return InvalidArgument(where + ": file name longer than 255 bytes");
  if (file.find('/') != std::string::npos || file.find('\\') != std::string::npos ||
      file.find('\0') != std::string::npos) {
    return InvalidArgument(where + ": a shard must be a file name in the model folder, not a path");
  }
  constexpr std::string_view kExt = ".safetensors";
  if (file.size() <= kExt.size() || file.compare(file.size() - kExt.size(), kExt.size(), kExt) != 0) {
    return InvalidArgument(where + ": a shard file name must end in .safetensors");
  }
  return Status::Ok();
}

}  // namespace

std::vector<std::string> CheckpointIndex::shards() const {
  std::set<std::string> s;
  for (const auto& [tensor, file] : weight_map) s.insert(file);
  return {s.begin(), s.end()};
}

StatusOr<CheckpointIndex> ParseCheckpointIndex(std::string_view text, const std::string& where) {
  ASSIGN_OR_RETURN(const json j, ParseJson(text, where));
  RETURN_IF_ERROR(CheckNoDuplicateKeys(text, where));
  if (!j.is_object()) return InvalidArgument(where + ": not a JSON object");
  CheckpointIndex index;
  if (const auto meta = j.find("metadata"); meta != j.end() && !meta->is_null()) {
    if (!meta->is_object()) {
      return InvalidArgument(where + ": 'metadata' must be an object, got " + JsonSnippet(*meta));
    }
    if (const auto total = meta->find("total_size"); total != meta->end() && !total->is_null()) {
      // Some exporters write it as a float with an integral value; accept what is exact.
      if (total->is_number_unsigned()) {
        index.total_size = total->get<std::uint64_t>();
      } else if (total->is_number_float() && total->get<double>() >= 0 &&
                 total->get<double>() < 1.8e19 &&
                 total->get<double>() == static_cast<double>(static_cast<std::uint64_t>(total->get<double>()))) {
        index.total_size = static_cast<std::uint64_t>(total->get<double>());
      } else {
        return InvalidArgument(where + ": 'metadata.total_size' must be a non-negative integer, got " +
                               JsonSnippet(*total));
      }
    }
  }
  const auto map = j.find("weight_map");
  if (map == j.end() || map->is_null()) return InvalidArgument(where + ": missing 'weight_map'");
  if (!map->is_object()) {
    return InvalidArgument(where + ": 'weight_map' must be an object {tensor: shard file}, got " +
                           JsonSnippet(*map));
  }
  if (map->empty()) return InvalidArgument(where + ": 'weight_map' is empty");
  if (map->size() > kMaxIndexEntries) {
    return InvalidArgument(where + ": 'weight_map' has " + std::to_string(map->size()) +
                           " entries, more than " + std::to_string(kMaxIndexEntries));
  }
  for (const auto& [tensor, file] : map->items()) {
    if (!file.is_string()) {
      return InvalidArgument(where + ": weight_map['" + Shown(tensor) +
                             "'] must be a shard file name, got " + JsonSnippet(file));
    }
    if (tensor.empty()) return InvalidArgument(where + ": weight_map has an empty tensor name");
    const std::string& name = file.get_ref<const std::string&>();
    RETURN_IF_ERROR(CheckShardName(tensor, name).WithContext(where));
    index.weight_map.emplace(tensor, name);
  }
  return index;
}

StatusOr<Checkpoint> Checkpoint::Open(const std::string& dir) {
  Checkpoint ckpt;
  ckpt.dir_ = dir;
  const std::string shown_dir = SanitizeUtf8(dir);
  const fs::path index_path = fs::path(dir) / kCheckpointIndexFile;
  std::error_code ec;
  if (fs::exists(index_path, ec)) {
    const std::string where = SanitizeUtf8(index_path.string());
    ASSIGN_OR_RETURN(const std::string text,
                     ReadFile(index_path.string(), "checkpoint index", kMaxIndexBytes));
    ASSIGN_OR_RETURN(const CheckpointIndex index, ParseCheckpointIndex(text, where));
    ckpt.has_index_ = true;
    std::map<std::string, size_t> file_index;
    for (const std::string& shard : index.shards()) {
      const fs::path p = fs::path(dir) / shard;
      if (!fs::exists(p, ec)) {
        std::string example;
        size_t count = 0;
        for (const auto& [tensor, file] : index.weight_map) {
          if (file != shard) continue;
          if (count++ == 0) example = tensor;
        }
        return NotFound(where + " names shard '" + Shown(shard) + "' (for " +
                        std::to_string(count) + " tensor(s), e.g. '" + Shown(example) +
                        "') but " + SanitizeUtf8(p.string()) +
                        " does not exist; the download is incomplete");
      }
      ASSIGN_OR_RETURN(SafetensorsFile file, SafetensorsFile::Open(p.string()));
      file_index[shard] = ckpt.files_.size();
      ckpt.files_.push_back(std::make_shared<const SafetensorsFile>(std::move(file)));
    }
    // The map must agree with the shards: every tensor where the index says, and no tensor
    // the index places elsewhere.
    for (const auto& [tensor, shard] : index.weight_map) {
      const size_t i = file_index.at(shard);
      if (ckpt.files_[i]->Find(tensor) == nullptr) {
        return DataLoss(where + " maps tensor '" + Shown(tensor) + "' to " +
                        SanitizeUtf8(ckpt.files_[i]->path()) + ", which has no such tensor");
      }
      ckpt.where_.emplace(tensor, i);
    }
    for (size_t i = 0; i < ckpt.files_.size(); ++i) {
      for (const std::string& name : ckpt.files_[i]->names()) {
        const auto it = index.weight_map.find(name);
        if (it != index.weight_map.end() && file_index.at(it->second) != i) {
          return DataLoss("tensor '" + Shown(name) + "' is in " + SanitizeUtf8(ckpt.files_[i]->path()) +
                          " but " + where + " maps it to '" + Shown(it->second) + "'");
        }
      }
    }
    return ckpt;
  }

  std::vector<fs::path> paths;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    if (e.path().extension() == ".safetensors" && e.is_regular_file(ec)) paths.push_back(e.path());
  }
  if (ec) return Internal(shown_dir + ": cannot list the folder: " + ec.message());
  if (paths.empty()) return NotFound(shown_dir + ": no *.safetensors files in the model folder");
  std::sort(paths.begin(), paths.end());  // deterministic shard order and error messages
  for (const fs::path& p : paths) {
    ASSIGN_OR_RETURN(SafetensorsFile shard, SafetensorsFile::Open(p.string()));
    const size_t index = ckpt.files_.size();
    for (const std::string& name : shard.names()) {
      const auto [it, inserted] = ckpt.where_.emplace(name, index);
      if (!inserted) {
        return DataLoss("tensor '" + Shown(name) + "' appears in both " +
                        SanitizeUtf8(ckpt.files_[it->second]->path()) + " and " +
                        SanitizeUtf8(shard.path()));
      }
    }
    ckpt.files_.push_back(std::make_shared<const SafetensorsFile>(std::move(shard)));
  }
  return ckpt;
}

std::optional<Checkpoint::Entry> Checkpoint::Find(const std::string& name) const {
  const auto it = where_.find(name);
  if (it == where_.end()) return std::nullopt;
  const auto& file = files_[it->second];
  return Entry{file, file->Find(name)};
}

}  // namespace tediserve::engine
