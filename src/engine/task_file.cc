#include "engine/task_file.h"

#include <fstream>
#include <nlohmann/json.hpp>

namespace tediserve::engine {

StatusOr<std::vector<TaskProblem>> ReadTaskFile(const std::string& path, const Tokenizer& tokenizer) {
  std::ifstream in(path);
  if (!in) return NotFound("cannot open task file " + path);
  std::vector<TaskProblem> out;
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    ++n;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = path + ":" + std::to_string(n);
    const auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object()) return InvalidArgument(where + ": not a JSON object");
    for (const char* field : {"prompt", "answer"})
      if (!j.contains(field) || !j[field].is_string())
        return InvalidArgument(where + ": missing string field \"" + field + "\"");
    TaskProblem p;
    p.prompt = j["prompt"].get<std::string>();
    p.answer = j["answer"].get<std::string>();
    p.task = j.contains("task") && j["task"].is_string() ? j["task"].get<std::string>() : "all";
    auto ids = tokenizer.Encode(p.prompt);
    if (!ids.ok()) return ids.status().WithContext(where);
    p.ids = std::move(ids).value();
    if (p.ids.empty()) return InvalidArgument(where + ": empty prompt");
    out.push_back(std::move(p));
  }
  if (out.empty()) return InvalidArgument(path + ": no problems");
  return out;
}

}  // namespace tediserve::engine
