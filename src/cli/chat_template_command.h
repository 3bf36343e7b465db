// `tediserve chat-template`: renders conversations with a chat template, as the server will
// format chat requests (issue 16). Used to check a model's template before serving it and by
// tests against the reference renderer.
//
//   tediserve chat-template --template FILE_OR_TOKENIZER_CONFIG --input CASES.json
//
// CASES.json: [{"name": "...", "vars": {"messages": [...], "add_generation_prompt": true, ...}}]
// (the format of tests/hf_reference/render_template.mjs). Prints one JSON object per case:
// {"name", "ok": true, "text"} or {"name", "ok": false, "error"}. Exit 0 when every case
// rendered, 2 when the template does not compile (the message names line and column), a
// case failed, or an input is unreadable.
#pragma once

#include <string>

namespace CLI {
class App;
}

namespace tediserve::cli {

struct ChatTemplateArgs {
  std::string template_path;  // tokenizer_config.json, a model folder, or a template file
  std::string input;          // JSON cases
};

CLI::App* AddChatTemplateCommand(CLI::App& app, ChatTemplateArgs* args);
int RunChatTemplate(const ChatTemplateArgs& args);

}  // namespace tediserve::cli
