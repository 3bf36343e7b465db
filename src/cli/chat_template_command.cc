#include "cli/chat_template_command.h"

#include <CLI/CLI.hpp>
#include <iostream>
#include <nlohmann/json.hpp>

#include "common/input.h"
#include "engine/chat_template.h"

namespace tediserve::cli {

CLI::App* AddChatTemplateCommand(CLI::App& app, ChatTemplateArgs* args) {
  CLI::App* c = app.add_subcommand("chat-template", "render conversations with a chat template (JSON lines)");
  c->add_option("--template", args->template_path, "tokenizer_config.json, a model folder holding one, or a template file")
      ->required();
  c->add_option("--input", args->input, "JSON list of cases: [{\"name\", \"vars\": {\"messages\", \"add_generation_prompt\", ...}}]")
      ->required();
  return c;
}

int RunChatTemplate(const ChatTemplateArgs& args) {
  using ojson = nlohmann::ordered_json;
  StatusOr<engine::ChatTemplateSource> source = engine::LoadChatTemplateSource(args.template_path);
  if (!source.ok()) {
    std::cerr << "error: " << source.status().message() << "\n";
    return ExitCode(source.status());
  }
  StatusOr<engine::ChatTemplate> compiled = engine::ChatTemplate::Compile(source->text);
  if (!compiled.ok()) {
    std::cerr << "error: " << args.template_path << ": " << compiled.status().message() << "\n";
    return ExitCode(compiled.status());
  }
  StatusOr<std::string> text = ReadFile(args.input, "chat template cases");
  if (!text.ok()) {
    std::cerr << "error: " << text.status().message() << "\n";
    return ExitCode(text.status());
  }
  StatusOr<nlohmann::json> checked = ParseJson(*text, args.input, engine::ChatTemplate::kMaxNesting);
  if (!checked.ok()) {
    std::cerr << "error: " << checked.status().message() << "\n";
    return ExitCode(checked.status());
  }
  const ojson cases = ojson::parse(*text);  // again, keeping the order of object members
  if (!cases.is_array()) {
    std::cerr << "error: " << args.input << ": expected a JSON list of cases\n";
    return 2;
  }
  int failed = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    const ojson& c = cases[i];
    if (!c.is_object() || (c.contains("vars") && !c["vars"].is_object()) || (c.contains("name") && !c["name"].is_string())) {
      std::cerr << "error: " << args.input << ": case " << i << " must be {\"name\": string, \"vars\": object}\n";
      return 2;
    }
    ojson vars = source->defaults;
    if (c.contains("vars"))
      for (const auto& [k, v] : c["vars"].items()) vars[k] = v;
    ojson line = {{"name", c.value("name", "")}};
    StatusOr<std::string> out = compiled->Render(vars);
    if (out.ok()) {
      line["ok"] = true;
      line["text"] = *out;
    } else {
      ++failed;
      line["ok"] = false;
      line["error"] = out.status().message();
    }
    std::cout << line.dump(-1, ' ', false, ojson::error_handler_t::replace) << "\n";
  }
  if (failed > 0) {
    std::cerr << "error: " << failed << " of " << cases.size() << " cases did not render\n";
    return 2;
  }
  return 0;
}

}  // namespace tediserve::cli
