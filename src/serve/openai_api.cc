#include "serve/openai_api.h"

#include <cmath>
#include <set>

#include "common/input.h"

namespace tediserve::serve {
namespace {

using nlohmann::json;

ApiError Bad(std::string message, std::string param = "", int status = 400, std::string code = "") {
  ApiError e;
  e.status = status;
  e.message = std::move(message);
  e.param = std::move(param);
  e.code = std::move(code);
  return e;
}

std::string TypeName(const json& v) {
  switch (v.type()) {
    case json::value_t::null: return "null";
    case json::value_t::boolean: return "a boolean";
    case json::value_t::string: return "a string";
    case json::value_t::array: return "an array";
    case json::value_t::object: return "an object";
    default: return "a number";
  }
}

// The text of a message's content: a string, or an array of {"type": "text", "text"} parts.
std::optional<ApiError> ContentText(const json& c, const std::string& where, std::string* out) {
  if (c.is_string()) {
    *out += c.get<std::string>();
    return std::nullopt;
  }
  if (!c.is_array()) return Bad(where + " must be a string or an array of text parts", where);
  for (size_t i = 0; i < c.size(); ++i) {
    const json& p = c[i];
    const std::string pw = where + "[" + std::to_string(i) + "]";
    if (!p.is_object() || !p.contains("type") || p["type"] != "text" || !p.contains("text") || !p["text"].is_string())
      return Bad(pw + " must be {\"type\": \"text\", \"text\": string}; other content types are not supported", pw);
    *out += p["text"].get<std::string>();
  }
  return std::nullopt;
}

}  // namespace

std::string ErrorBody(const ApiError& e) {
  json j = {{"error",
             {{"message", SanitizeUtf8(e.message)},
              {"type", e.type},
              {"param", e.param.empty() ? json(nullptr) : json(e.param)},
              {"code", e.code.empty() ? json(nullptr) : json(e.code)}}}};
  return j.dump();
}

std::variant<CompletionRequest, ApiError> ParseCompletionRequest(std::string_view body, bool chat,
                                                                 const ApiLimits& limits,
                                                                 const engine::Tokenizer& tokenizer) {
  auto parsed = ParseJson(body, "request body");
  if (!parsed.ok()) return Bad("the body is not valid JSON: " + parsed.status().message());
  const json& j = *parsed;
  if (!j.is_object()) return Bad("the body must be a JSON object");
  CompletionRequest r;
  r.chat = chat;
  static const std::set<std::string> kCommon = {
      "model", "max_tokens", "temperature", "top_p", "n", "stream", "stream_options", "stop", "seed", "user",
      "logprobs", "presence_penalty", "frequency_penalty", "logit_bias",
      // TeDiServe's own fields
      "slo_ms", "priority", "min_threshold", "max_threshold", "block_size", "stream_canvas"};
  static const std::set<std::string> kCompletion = {"prompt", "echo", "best_of", "suffix"};
  static const std::set<std::string> kChat = {"messages", "max_completion_tokens", "top_logprobs", "tools",
                                              "tool_choice", "response_format", "parallel_tool_calls"};
  for (const auto& [k, v] : j.items()) {
    if (!kCommon.count(k) && !(chat ? kChat : kCompletion).count(k))
      return Bad("unknown field \"" + SanitizeUtf8(k) + "\"", k);
  }
  auto is_null = [&](const char* k) { return !j.contains(k) || j[k].is_null(); };

  // model
  if (!is_null("model")) {
    if (!j["model"].is_string()) return Bad("model must be a string", "model");
    const std::string m = j["model"].get<std::string>();
    if (m != limits.model_name)
      return Bad("the model \"" + SanitizeUtf8(m) + "\" does not exist; this server serves \"" + limits.model_name +
                     "\" (GET /v1/models)",
                 "model", 404, "model_not_found");
  }
  // Unsupported options: refused when set to anything but their neutral value.
  auto neutral_number = [&](const char* k, double neutral) -> std::optional<ApiError> {
    if (is_null(k)) return std::nullopt;
    if (!j[k].is_number() || j[k].get<double>() != neutral)
      return Bad(std::string(k) + " is not supported (only " + json(neutral).dump() + ")", k);
    return std::nullopt;
  };
  if (auto e = neutral_number("n", 1)) return *e;
  if (auto e = neutral_number("top_p", 1)) return *e;
  if (auto e = neutral_number("presence_penalty", 0)) return *e;
  if (auto e = neutral_number("frequency_penalty", 0)) return *e;
  if (!chat) {
    if (auto e = neutral_number("best_of", 1)) return *e;
    if (!is_null("echo") && !(j["echo"].is_boolean() && !j["echo"].get<bool>()))
      return Bad("echo is not supported", "echo");
    if (!is_null("suffix")) return Bad("suffix is not supported", "suffix");
  }
  if (!is_null("logprobs") && !(j["logprobs"].is_boolean() && !j["logprobs"].get<bool>()))
    return Bad("logprobs is not supported", "logprobs");
  for (const char* k : {"top_logprobs", "tools", "tool_choice", "response_format", "parallel_tool_calls"})
    if (!is_null(k)) return Bad(std::string(k) + " is not supported", k);
  if (!is_null("logit_bias") && !(j["logit_bias"].is_object() && j["logit_bias"].empty()))
    return Bad("logit_bias is not supported", "logit_bias");
  if (!is_null("user") && !j["user"].is_string()) return Bad("user must be a string", "user");

  // The prompt.
  std::string text;
  if (chat) {
    if (!j.contains("messages")) return Bad("messages is required", "messages");
    const json& ms = j["messages"];
    if (!ms.is_array() || ms.empty()) return Bad("messages must be a non-empty array", "messages");
    nlohmann::ordered_json conversation = nlohmann::ordered_json::array();
    for (size_t i = 0; i < ms.size(); ++i) {
      const std::string w = "messages[" + std::to_string(i) + "]";
      const json& m = ms[i];
      if (!m.is_object() || !m.contains("role") || !m["role"].is_string())
        return Bad(w + " must be an object with a string role", w);
      const std::string role = m["role"].get<std::string>();
      if (role != "system" && role != "user" && role != "assistant" && role != "developer")
        return Bad(w + ".role must be system, developer, user or assistant", w + ".role");
      for (const auto& [k, v] : m.items())
        if (k != "role" && k != "content" && k != "name") return Bad(w + ": unknown field \"" + SanitizeUtf8(k) + "\"", w);
      if (!m.contains("content")) return Bad(w + ".content is required", w + ".content");
      std::string content;
      if (auto e = ContentText(m["content"], w + ".content", &content)) return *e;
      if (content.size() > static_cast<size_t>(limits.max_prompt_chars))
        return Bad(w + ".content has " + std::to_string(content.size()) + " bytes, the limit is " +
                       std::to_string(limits.max_prompt_chars),
                   w + ".content");
      text += content;
      conversation.push_back({{"role", role}, {"content", content}});
    }
    if (limits.chat_template) {
      nlohmann::ordered_json vars = limits.chat_defaults;
      vars["messages"] = std::move(conversation);
      vars["add_generation_prompt"] = true;
      auto rendered = limits.chat_template->Render(vars);
      if (!rendered.ok()) return Bad("the chat template cannot format these messages: " + rendered.status().message(), "messages");
      text = std::move(rendered).value();
    }
  } else {
    if (!j.contains("prompt")) return Bad("prompt is required", "prompt");
    const json& p = j["prompt"];
    if (p.is_string()) {
      text = p.get<std::string>();
    } else if (p.is_array() && p.size() == 1 && p[0].is_string()) {
      text = p[0].get<std::string>();
    } else if (p.is_array() && p.size() > 1) {
      return Bad("only one prompt per request is supported", "prompt");
    } else {
      return Bad("prompt must be a string (token arrays are not supported), got " + TypeName(p), "prompt");
    }
  }
  if (static_cast<int64_t>(text.size()) > limits.max_prompt_chars)
    return Bad("the prompt has " + std::to_string(text.size()) + " bytes, the limit is " +
                   std::to_string(limits.max_prompt_chars),
               chat ? "messages" : "prompt");
  if (text.empty()) return Bad("the prompt is empty", chat ? "messages" : "prompt");
  auto ids = tokenizer.Encode(text);
  if (!ids.ok()) return Bad("the prompt cannot be tokenized: " + ids.status().message(), chat ? "messages" : "prompt");
  r.params.prompt = std::move(ids).value();
  for (int32_t id : r.params.prompt)
    if (id == limits.mask_id) return Bad("the prompt contains the mask token", chat ? "messages" : "prompt");
  const int prompt_len = static_cast<int>(r.params.prompt.size());

  // Lengths.
  r.params.block_size = limits.block_size;
  if (!is_null("block_size")) {
    if (!j["block_size"].is_number_integer()) return Bad("block_size must be an integer", "block_size");
    if (j["block_size"].get<int64_t>() != limits.block_size)
      return Bad("this server decodes in blocks of " + std::to_string(limits.block_size) +
                     " (its policy plans per block); start it with another --block-size for others",
                 "block_size");
  }
  const char* mt = chat && !is_null("max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
  int want = limits.default_gen_length;
  if (!is_null(mt)) {
    if (!j[mt].is_number_integer()) return Bad(std::string(mt) + " must be an integer", mt);
    const int64_t v = j[mt].get<int64_t>();
    if (v < 1) return Bad(std::string(mt) + " must be >= 1", mt);
    if (v > limits.context) return Bad(std::string(mt) + " exceeds the model's context of " + std::to_string(limits.context), mt);
    want = static_cast<int>(v);
    r.requested_max_tokens = want;
  }
  const int B = limits.block_size;
  r.params.gen_length = (want + B - 1) / B * B;
  if (prompt_len + r.params.gen_length > limits.context)
    return Bad("the prompt (" + std::to_string(prompt_len) + " tokens) plus " + std::to_string(r.params.gen_length) +
                   " output tokens exceeds the model's context of " + std::to_string(limits.context),
               chat ? "messages" : "prompt", 400, "context_length_exceeded");

  // Sampling.
  if (!is_null("temperature")) {
    if (!j["temperature"].is_number()) return Bad("temperature must be a number", "temperature");
    const double t = j["temperature"].get<double>();
    if (!(t >= 0 && t <= 2)) return Bad("temperature must be in [0, 2]", "temperature");
    r.params.temperature = static_cast<float>(t);
  }
  if (!is_null("seed")) {
    if (!j["seed"].is_number_integer()) return Bad("seed must be an integer", "seed");
    r.params.seed = static_cast<uint64_t>(j["seed"].get<int64_t>());
  }
  if (!is_null("stop")) {
    const json& s = j["stop"];
    if (s.is_string()) r.stop.push_back(s.get<std::string>());
    else if (s.is_array() && s.size() <= 4) {
      for (const json& x : s) {
        if (!x.is_string()) return Bad("stop must be a string or an array of up to 4 strings", "stop");
        r.stop.push_back(x.get<std::string>());
      }
    } else return Bad("stop must be a string or an array of up to 4 strings", "stop");
    for (const auto& x : r.stop)
      if (x.empty() || x.size() > 256) return Bad("stop sequences must have 1 to 256 bytes", "stop");
  }
  if (!is_null("stream")) {
    if (!j["stream"].is_boolean()) return Bad("stream must be a boolean", "stream");
    r.stream = j["stream"].get<bool>();
  }
  if (!is_null("stream_options")) {
    const json& so = j["stream_options"];
    if (!so.is_object()) return Bad("stream_options must be an object", "stream_options");
    if (!r.stream) return Bad("stream_options is only allowed with stream: true", "stream_options");
    for (const auto& [k, v] : so.items()) {
      if (k != "include_usage" || !v.is_boolean())
        return Bad("stream_options supports only include_usage (a boolean)", "stream_options");
      r.include_usage = v.get<bool>();
    }
  }
  if (!is_null("stream_canvas")) {
    if (!j["stream_canvas"].is_boolean()) return Bad("stream_canvas must be a boolean", "stream_canvas");
    r.stream_canvas = j["stream_canvas"].get<bool>();
    if (r.stream_canvas && !r.stream) return Bad("stream_canvas needs stream: true", "stream_canvas");
    r.params.canvas = r.stream_canvas;
  }

  // SLO and thresholds.
  if (!is_null("slo_ms")) {
    if (!j["slo_ms"].is_number()) return Bad("slo_ms must be a number", "slo_ms");
    const double v = j["slo_ms"].get<double>();
    if (!(v > 0 && v <= 3.6e6)) return Bad("slo_ms must be in (0, 3600000]", "slo_ms");
    r.params.slo_s = v / 1000;
  }
  if (!is_null("priority")) {
    if (!j["priority"].is_number_integer()) return Bad("priority must be an integer", "priority");
    const int64_t v = j["priority"].get<int64_t>();
    if (v < 0 || v > 100) return Bad("priority must be in [0, 100]", "priority");
    r.params.priority = static_cast<int>(v);
  }
  for (const char* k : {"min_threshold", "max_threshold"}) {
    if (is_null(k)) continue;
    if (!j[k].is_number()) return Bad(std::string(k) + " must be a number", k);
    const double v = j[k].get<double>();
    if (!(v > 0 && v <= 1)) return Bad(std::string(k) + " must be in (0, 1]", k);
    (std::string(k) == "min_threshold" ? r.params.min_threshold : r.params.max_threshold) = v;
  }
  if (r.params.min_threshold > r.params.max_threshold)
    return Bad("min_threshold must not exceed max_threshold", "min_threshold");
  return r;
}

FinalText TextOf(const std::vector<int32_t>& output, const engine::Tokenizer& tokenizer, int32_t mask_id,
                 const std::vector<std::string>& stop) {
  FinalText f;
  const FinalPrefix p = FinalPrefixOf(output, mask_id, tokenizer.eos_id());
  const std::vector<int32_t> ids(output.begin(), output.begin() + static_cast<std::ptrdiff_t>(p.length));
  f.eos = p.eos;
  f.finished = p.Finished();
  // The whole sequence at once: a byte-level BPE token may hold part of a UTF-8 character,
  // so tokens decoded one by one would each show U+FFFD.
  f.text = tokenizer.Decode(ids, -1);
  f.tokens = static_cast<int>(ids.size());
  size_t cut = std::string::npos;
  for (const auto& s : stop) cut = std::min(cut, f.text.find(s));
  if (cut != std::string::npos) {
    f.text.resize(cut);
    f.stopped = f.finished = true;
    f.eos = false;
    // Tokens the kept text needs: the fewest whose decoding reaches the cut (a prefix's
    // decoding only grows with more tokens; binary search keeps it O(n log n)).
    int lo = 0, hi = static_cast<int>(ids.size());
    while (lo < hi) {
      const int mid = (lo + hi) / 2;
      const std::vector<int32_t> prefix(ids.begin(), ids.begin() + mid);
      if (tokenizer.Decode(prefix, -1).size() >= cut) hi = mid;
      else lo = mid + 1;
    }
    f.tokens = lo;
  } else if (!f.finished) {
    // A character whose bytes are still partly masked decodes as a trailing U+FFFD for now:
    // hold it back until the rest is known.
    static const std::string kReplacement = "\xEF\xBF\xBD";
    if (f.text.size() >= 3 && f.text.compare(f.text.size() - 3, 3, kReplacement) == 0) f.text.resize(f.text.size() - 3);
  }
  return f;
}

size_t StreamableLength(const std::string& text, const std::vector<std::string>& stop, bool finished) {
  if (finished) return text.size();
  size_t hold = 0;
  for (const auto& s : stop)
    for (size_t k = std::min(s.size() - 1, text.size()); k > hold; --k)
      if (text.compare(text.size() - k, k, s, 0, k) == 0) {
        hold = k;
        break;
      }
  return text.size() - hold;
}

json ExtraFields(const CompletionRequest& req, const RequestView& v) {
  double sum = 0;
  for (double t : v.thresholds) sum += t;
  json j = {{"steps", v.steps},
            {"thresholds", v.thresholds},
            {"mean_threshold", v.thresholds.empty() ? 0.0 : sum / v.thresholds.size()},
            {"block_size", req.params.block_size},
            {"output_tokens", req.params.gen_length},
            {"max_tokens_rounded", req.requested_max_tokens > 0 && req.requested_max_tokens != req.params.gen_length}};
  if (v.done) {
    // A request the server cut at its end of text (EOS or a stop sequence) leaves as
    // cancelled; its answer was complete when it left.
    const double latency = v.record.finish - v.record.arrival;
    j["slo_ms"] = v.record.slo * 1000;
    j["latency_ms"] = latency * 1000;
    j["slo_met"] = v.record.outcome == host::Outcome::kCompleted ? v.record.met : latency <= v.record.slo;
    j["migrations"] = v.record.migrations;
  }
  return j;
}

json CompletionResponse(const CompletionRequest& req, const ResponseInfo& info, const FinalText& t,
                        const RequestView& v) {
  const std::string finish = (t.eos || t.stopped) ? "stop" : "length";
  json choice = {{"index", 0}, {"finish_reason", finish}, {"logprobs", nullptr}};
  if (req.chat) choice["message"] = {{"role", "assistant"}, {"content", SanitizeUtf8(t.text)}};
  else choice["text"] = SanitizeUtf8(t.text);
  return {{"id", info.id},
          {"object", req.chat ? "chat.completion" : "text_completion"},
          {"created", info.created},
          {"model", info.model},
          {"choices", json::array({choice})},
          {"usage",
           {{"prompt_tokens", info.prompt_tokens},
            {"completion_tokens", t.tokens},
            {"total_tokens", info.prompt_tokens + t.tokens}}},
          {"tediserve", ExtraFields(req, v)}};
}

json StreamChunk(const CompletionRequest& req, const ResponseInfo& info, const std::string& delta, bool first,
                 const std::string& finish) {
  json choice = {{"index", 0}, {"finish_reason", finish.empty() ? json(nullptr) : json(finish)}, {"logprobs", nullptr}};
  if (req.chat) {
    json d = json::object();
    if (first) d["role"] = "assistant";
    if (!delta.empty() || (first && finish.empty())) d["content"] = SanitizeUtf8(delta);
    choice["delta"] = d;
  } else {
    choice["text"] = SanitizeUtf8(delta);
  }
  return {{"id", info.id},
          {"object", req.chat ? "chat.completion.chunk" : "text_completion"},
          {"created", info.created},
          {"model", info.model},
          {"choices", json::array({choice})}};
}

json UsageChunk(const CompletionRequest& req, const ResponseInfo& info, int completion_tokens, const RequestView& v) {
  return {{"id", info.id},
          {"object", req.chat ? "chat.completion.chunk" : "text_completion"},
          {"created", info.created},
          {"model", info.model},
          {"choices", json::array()},
          {"usage",
           {{"prompt_tokens", info.prompt_tokens},
            {"completion_tokens", completion_tokens},
            {"total_tokens", info.prompt_tokens + completion_tokens}}},
          {"tediserve", ExtraFields(req, v)}};
}

namespace {

// Fields of a small JSON object body: only `allowed`, and the model (when named) must be ours.
std::optional<ApiError> CheckObject(const json& j, const std::set<std::string>& allowed, const ApiLimits& limits) {
  if (!j.is_object()) return Bad("the body must be a JSON object");
  for (const auto& [k, v] : j.items())
    if (!allowed.count(k)) return Bad("unknown field \"" + SanitizeUtf8(k) + "\"", k);
  if (j.contains("model") && !j["model"].is_null()) {
    if (!j["model"].is_string()) return Bad("model must be a string", "model");
    if (j["model"].get<std::string>() != limits.model_name)
      return Bad("the model \"" + SanitizeUtf8(j["model"].get<std::string>()) + "\" does not exist; this server serves \"" +
                     limits.model_name + "\"",
                 "model", 404, "model_not_found");
  }
  return std::nullopt;
}

}  // namespace

std::variant<std::vector<int>, ApiError> ParseLayoutRequest(std::string_view body) {
  auto parsed = ParseJson(body, "request body");
  if (!parsed.ok()) return Bad("the body is not valid JSON: " + parsed.status().message());
  const json& j = *parsed;
  ApiLimits none;
  if (auto e = CheckObject(j, {"layout"}, none)) return *e;
  if (!j.contains("layout") || !j["layout"].is_array())
    return Bad("layout is required: an array of TP degrees, e.g. [1, 1] or [2]", "layout");
  const json& l = j["layout"];
  if (l.empty() || l.size() > 1024) return Bad("layout must hold 1 to 1024 instances", "layout");
  std::vector<int> out;
  for (const json& v : l) {
    if (!v.is_number_integer() || v.get<int64_t>() < 1 || v.get<int64_t>() > 1024)
      return Bad("layout: every TP degree must be an integer from 1 to 1024, not " + SanitizeUtf8(v.dump()), "layout");
    out.push_back(static_cast<int>(v.get<int64_t>()));
  }
  return out;
}

std::variant<TokenizeRequest, ApiError> ParseTokenizeRequest(std::string_view body, const ApiLimits& limits) {
  auto parsed = ParseJson(body, "request body");
  if (!parsed.ok()) return Bad("the body is not valid JSON: " + parsed.status().message());
  const json& j = *parsed;
  if (auto e = CheckObject(j, {"prompt", "add_special_tokens", "model"}, limits)) return *e;
  if (!j.contains("prompt") || !j["prompt"].is_string()) return Bad("prompt is required: a string", "prompt");
  TokenizeRequest r;
  r.text = j["prompt"].get<std::string>();
  if (static_cast<int64_t>(r.text.size()) > limits.max_prompt_chars)
    return Bad("prompt is " + std::to_string(r.text.size()) + " bytes; the limit is " +
                   std::to_string(limits.max_prompt_chars),
               "prompt");
  if (j.contains("add_special_tokens") && !j["add_special_tokens"].is_null()) {
    if (!j["add_special_tokens"].is_boolean()) return Bad("add_special_tokens must be a boolean", "add_special_tokens");
    r.add_special_tokens = j["add_special_tokens"].get<bool>();
  }
  return r;
}

std::variant<std::vector<int32_t>, ApiError> ParseDetokenizeRequest(std::string_view body, const ApiLimits& limits,
                                                                    int32_t vocab_size) {
  auto parsed = ParseJson(body, "request body");
  if (!parsed.ok()) return Bad("the body is not valid JSON: " + parsed.status().message());
  const json& j = *parsed;
  if (auto e = CheckObject(j, {"tokens", "model"}, limits)) return *e;
  if (!j.contains("tokens") || !j["tokens"].is_array()) return Bad("tokens is required: an array of token ids", "tokens");
  const json& t = j["tokens"];
  if (static_cast<int64_t>(t.size()) > limits.max_prompt_chars)
    return Bad("tokens holds " + std::to_string(t.size()) + " ids; the limit is " + std::to_string(limits.max_prompt_chars),
               "tokens");
  std::vector<int32_t> ids;
  ids.reserve(t.size());
  for (size_t i = 0; i < t.size(); ++i) {
    if (!t[i].is_number_integer() || t[i].get<int64_t>() < 0 || t[i].get<int64_t>() >= vocab_size)
      return Bad("tokens[" + std::to_string(i) + "] must be a token id from 0 to " + std::to_string(vocab_size - 1), "tokens");
    ids.push_back(static_cast<int32_t>(t[i].get<int64_t>()));
  }
  return ids;
}

}  // namespace tediserve::serve
