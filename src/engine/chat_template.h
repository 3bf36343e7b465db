// Chat templates: the Jinja subset that Hugging Face chat templates use (Qwen/Dream, LLaDA-
// Instruct, ChatML), rendered byte for byte as @huggingface/jinja renders them (the reference
// the tests compare against; docs/design.md, "Chat templates", lists the subset and where the
// reference differs from Python Jinja).
//
// A template is compiled once (at start-up): lexing, parsing to an AST and a check pass that
// refuses every construct the renderer does not implement (an unknown statement, filter,
// test, method or function, argument unpacking, call blocks, ...) with the construct's name
// and its line and column. Rendering errors (raise_exception, an operation on an undefined
// value, a filter applied to the wrong type, a runaway loop) are errors too, never a
// half-rendered prompt.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace tediserve::engine {

namespace chat_template_internal {
struct Program;
}  // namespace chat_template_internal

class ChatTemplate {
 public:
  // Bounds on what a template and one render may use (checked, each a clear error).
  static constexpr size_t kMaxSourceBytes = 1u << 20;      // template text
  static constexpr int kMaxNesting = 128;                  // parser and value nesting
  static constexpr size_t kMaxOutputBytes = 64u << 20;     // any string built while rendering
  static constexpr long kMaxSteps = 5'000'000;             // evaluated nodes per render
  static constexpr size_t kMaxAllocBytes = 512u << 20;     // strings and lists built per render

  // Parses and checks the template. InvalidArgument "chat template, line L, column C: ..."
  // naming the problem (a syntax error or an unsupported construct).
  static StatusOr<ChatTemplate> Compile(std::string_view source);

  // Renders with the members of `variables` (a JSON object: messages, add_generation_prompt,
  // tools, bos_token, ...) as the template's variables. Object members keep their order (as
  // JSON.parse keeps it in the reference: integer-like keys first), which `tojson` shows.
  // InvalidArgument "chat template, line L, column C: ..." when rendering fails.
  StatusOr<std::string> Render(const nlohmann::ordered_json& variables) const;
  // The same from a key-sorted nlohmann::json.
  StatusOr<std::string> Render(const nlohmann::json& variables) const;

 private:
  std::shared_ptr<const chat_template_internal::Program> program_;
};

// Where a chat template comes from and the special tokens that go with it.
struct ChatTemplateSource {
  std::string text;                 // the template
  nlohmann::ordered_json defaults;  // bos_token, eos_token, unk_token, pad_token when known
};

// `path` is a tokenizer_config.json (its "chat_template": a string, or a list of
// {"name", "template"} from which "default" is taken; its special tokens, given as strings or
// as {"content": ...}, become `defaults`), a folder holding one, or a file holding the
// template text itself (any other name). Errors name the path: a missing file, a config
// without "chat_template", a chat_template of the wrong type.
StatusOr<ChatTemplateSource> LoadChatTemplateSource(const std::string& path);

}  // namespace tediserve::engine
