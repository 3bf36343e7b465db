// Task files (JSONL problems) read with the bundled tiny model's tokenizer.
#include <cstdlib>

#include "engine/task_file.h"
#include "engine/tokenizer.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tediserve;
  static const engine::Tokenizer* tok = [] {
    auto t = engine::Tokenizer::FromFile(std::string(TEDI_SOURCE_DIR) + "/models/tiny-llada/tokenizer.json");
    if (!t.ok()) std::abort();
    return new engine::Tokenizer(std::move(t).value());
  }();
  const std::string path = fuzz::WriteInput(data, size, "tasks.jsonl");
  StatusOr<std::vector<engine::TaskProblem>> problems = engine::ReadTaskFile(path, *tok);
  if (problems.ok())
    for (const auto& p : *problems)
      if (p.ids.empty()) __builtin_trap();
  return 0;
}
