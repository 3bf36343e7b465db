#include "engine/task_file.h"

#include <nlohmann/json.hpp>

#include "common/input.h"
#include "engine/model_config.h"

namespace tediserve::engine {

namespace {

// A prompt longer than the longest context cannot run anyway; these bounds keep a corrupt
// file from tokenizing gigabytes or holding millions of problems in memory.
constexpr size_t kMaxPromptBytes = size_t{4} << 20;
constexpr size_t kMaxAnswerBytes = size_t{1} << 20;
constexpr size_t kMaxTaskNameBytes = 256;
constexpr size_t kMaxProblems = size_t{1} << 20;

}  // namespace

StatusOr<std::vector<TaskProblem>> ReadTaskFile(const std::string& path, const Tokenizer& tokenizer) {
  std::vector<TaskProblem> out;
  auto field = [](const nlohmann::json& j, const char* name, size_t max_bytes,
                  std::string* value) -> Status {
    const auto it = j.find(name);
    if (it == j.end() || !it->is_string()) {
      return InvalidArgument(std::string("missing string field \"") + name + "\"" +
                             (it == j.end() ? "" : ", got " + JsonSnippet(*it)));
    }
    const std::string& s = it->get_ref<const std::string&>();
    if (s.size() > max_bytes) {
      return InvalidArgument(std::string("field \"") + name + "\" is " + std::to_string(s.size()) +
                             " bytes, more than " + std::to_string(max_bytes));
    }
    *value = s;
    return Status::Ok();
  };
  RETURN_IF_ERROR(ForEachJsonLine(path, "task file", [&](int, const nlohmann::json& j) -> Status {
    if (!j.is_object()) return InvalidArgument("not a JSON object, got " + JsonSnippet(j));
    if (out.size() >= kMaxProblems) {
      return InvalidArgument("more than " + std::to_string(kMaxProblems) + " problems");
    }
    TaskProblem p;
    RETURN_IF_ERROR(field(j, "prompt", kMaxPromptBytes, &p.prompt));
    RETURN_IF_ERROR(field(j, "answer", kMaxAnswerBytes, &p.answer));
    p.task = "all";
    if (j.contains("task") && !j.at("task").is_null()) RETURN_IF_ERROR(field(j, "task", kMaxTaskNameBytes, &p.task));
    if (p.task.empty()) return InvalidArgument("field \"task\" is empty");
    ASSIGN_OR_RETURN(p.ids, tokenizer.Encode(p.prompt));
    if (p.ids.empty()) return InvalidArgument("empty prompt");
    if (p.ids.size() >= static_cast<size_t>(kMaxSeqLen)) {
      return InvalidArgument("prompt of " + std::to_string(p.ids.size()) +
                             " tokens is longer than any supported context (" +
                             std::to_string(kMaxSeqLen) + ")");
    }
    out.push_back(std::move(p));
    return Status::Ok();
  }));
  if (out.empty()) return InvalidArgument("task file " + SanitizeUtf8(path) + ": no problems");
  return out;
}

}  // namespace tediserve::engine
