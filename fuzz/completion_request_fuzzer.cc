// HTTP request bodies of /v1/completions and /v1/chat/completions: ParseCompletionRequest
// with the bundled model's tokenizer, both endpoints; the same bytes as /admin/layout,
// /tokenize and /detokenize bodies. An accepted request must satisfy what
// the runtime relies on: a non-empty prompt of in-vocabulary ids without the mask, an output
// length that is a positive multiple of the block size and fits the context, thresholds in
// (0, 1] in order.
#include "fuzz_util.h"
#include "serve/openai_api.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tediserve;
  static const engine::Tokenizer* tok = [] {
    auto t = engine::Tokenizer::FromFile(std::string(TEDI_SOURCE_DIR) + "/models/tiny-llada/tokenizer.json");
    if (!t.ok()) __builtin_trap();
    return new engine::Tokenizer(std::move(t).value());
  }();
  serve::ApiLimits limits;
  limits.model_name = "tiny-llada";
  limits.context = 64;
  limits.default_gen_length = 8;
  limits.block_size = 8;
  limits.max_prompt_chars = 4096;
  limits.mask_id = *tok->TokenToId("<|mask|>");
  const std::string_view body = fuzz::AsText(data, size);
  for (bool chat : {false, true}) {
    auto r = serve::ParseCompletionRequest(body, chat, limits, *tok);
    if (auto* e = std::get_if<serve::ApiError>(&r)) {
      if (e->status < 400 || e->status > 499 || e->message.empty()) __builtin_trap();
      (void)serve::ErrorBody(*e);
      continue;
    }
    const auto& c = std::get<serve::CompletionRequest>(r);
    const auto& p = c.params;
    if (p.prompt.empty() || p.gen_length <= 0 || p.gen_length % limits.block_size != 0 ||
        static_cast<int>(p.prompt.size()) + p.gen_length > limits.context)
      __builtin_trap();
    for (int32_t id : p.prompt)
      if (id < 0 || id >= tok->vocab_size() || id == limits.mask_id) __builtin_trap();
    if (!(p.min_threshold >= 0 && p.min_threshold <= p.max_threshold && p.max_threshold <= 1)) __builtin_trap();
    if (!(p.slo_s >= 0) || !(p.temperature >= 0 && p.temperature <= 2)) __builtin_trap();
  }
  auto bad = [](const serve::ApiError& e) { return e.status < 400 || e.status > 499 || e.message.empty(); };
  auto layout = serve::ParseLayoutRequest(body);
  if (auto* e = std::get_if<serve::ApiError>(&layout)) {
    if (bad(*e)) __builtin_trap();
  } else {
    const auto& l = std::get<std::vector<int>>(layout);
    if (l.empty() || l.size() > 1024) __builtin_trap();
    for (int tp : l)
      if (tp < 1 || tp > 1024) __builtin_trap();
  }
  auto tk = serve::ParseTokenizeRequest(body, limits);
  if (auto* e = std::get_if<serve::ApiError>(&tk)) {
    if (bad(*e)) __builtin_trap();
  } else if (static_cast<int>(std::get<serve::TokenizeRequest>(tk).text.size()) > limits.max_prompt_chars) {
    __builtin_trap();
  } else {
    (void)tok->Encode(std::get<serve::TokenizeRequest>(tk).text, true);
  }
  auto dt = serve::ParseDetokenizeRequest(body, limits, tok->vocab_size());
  if (auto* e = std::get_if<serve::ApiError>(&dt)) {
    if (bad(*e)) __builtin_trap();
  } else {
    for (int32_t id : std::get<std::vector<int32_t>>(dt))
      if (id < 0 || id >= tok->vocab_size()) __builtin_trap();
    (void)tok->DecodeAll(std::get<std::vector<int32_t>>(dt));
  }
  return 0;
}
