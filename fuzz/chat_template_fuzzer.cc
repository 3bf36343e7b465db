// A chat template (issue 16): ChatTemplate::Compile on the bytes, then an accepted template
// rendered over a fixed conversation (system, user, assistant with <think> and tool calls,
// tool response) with tools, with and without the generation prompt. Errors are expected for
// most inputs; crashes, hangs and unbounded memory are not (the renderer bounds nesting,
// steps and allocation).
#include <nlohmann/json.hpp>

#include "engine/chat_template.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tediserve;
  StatusOr<engine::ChatTemplate> t = engine::ChatTemplate::Compile(fuzz::AsText(data, size));
  if (!t.ok()) return 0;
  static const nlohmann::ordered_json kVars = nlohmann::ordered_json::parse(R"({
    "messages": [
      {"role": "system", "content": "You are helpful."},
      {"role": "user", "content": "Weather in Zürich? 😀"},
      {"role": "assistant", "content": "<think>\nlook it up\n</think>\n\nChecking.",
       "tool_calls": [{"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Zürich", "days": 2}}}]},
      {"role": "tool", "content": "{\"temp\": 18.5}"},
      {"role": "assistant", "content": null, "reasoning_content": "done"}
    ],
    "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "10": {"type": "integer"}}}}}],
    "bos_token": "<s>", "eos_token": "</s>", "enable_thinking": false
  })");
  for (bool gen : {true, false}) {
    nlohmann::ordered_json vars = kVars;
    vars["add_generation_prompt"] = gen;
    StatusOr<std::string> out = t->Render(vars);
    if (out.ok() && out->size() > engine::ChatTemplate::kMaxOutputBytes) __builtin_trap();
  }
  return 0;
}
