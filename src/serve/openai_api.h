// The OpenAI-compatible request and response shapes (docs/design.md section 5): parsing and
// validating a /v1/completions or /v1/chat/completions body into GenerateParams, and writing
// responses, stream chunks and errors. Pure functions: the HTTP layer and the fuzz target call
// them; nothing here touches the runtime.
#pragma once

#include <nlohmann/json.hpp>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "engine/chat_template.h"
#include "engine/tokenizer.h"
#include "serve/runtime.h"

namespace tediserve::serve {

// An error in OpenAI's shape: {"error": {"message", "type", "param", "code"}} with its status.
struct ApiError {
  int status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;  // the offending field, if any
  std::string code;
};
std::string ErrorBody(const ApiError& e);

// What the server is and allows.
struct ApiLimits {
  std::string model_name;
  int context = 0;             // the model's max sequence length
  int default_gen_length = 0;  // output tokens when max_tokens is absent
  int block_size = 0;          // the policy's block size
  int max_prompt_chars = 65536;
  int32_t mask_id = -1;
  // The model's chat template (tokenizer_config.json, or --chat-template): a chat request's
  // prompt is its rendering with add_generation_prompt. None: the messages' text, concatenated.
  std::shared_ptr<const engine::ChatTemplate> chat_template;
  nlohmann::ordered_json chat_defaults = nlohmann::ordered_json::object();  // bos_token, eos_token, ...
};

struct CompletionRequest {
  bool chat = false;
  bool stream = false;
  bool include_usage = false;
  bool stream_canvas = false;
  std::vector<std::string> stop;
  int requested_max_tokens = 0;  // as asked (0: absent)
  GenerateParams params;         // gen_length = max_tokens rounded up to the block size
};

// Parses and validates a request body. Unsupported options (n > 1, logprobs, echo, best_of,
// suffix, penalties, tools, top_p != 1) and unknown fields are refused, not ignored.
std::variant<CompletionRequest, ApiError> ParseCompletionRequest(std::string_view body, bool chat,
                                                                 const ApiLimits& limits,
                                                                 const engine::Tokenizer& tokenizer);

// The text of an output so far: positions before the first masked one, decoded up to EOS,
// cut at the first stop sequence. `finished` tells whether the text can no longer grow (EOS
// or stop found, or no mask left); `stopped` whether a stop sequence cut it.
struct FinalText {
  std::string text;
  int tokens = 0;  // output tokens the text covers (up to EOS / the stop cut)
  bool finished = false;
  bool stopped = false;
  bool eos = false;
};
FinalText TextOf(const std::vector<int32_t>& output, const engine::Tokenizer& tokenizer, int32_t mask_id,
                 const std::vector<std::string>& stop);

// Bytes of `text` that may be streamed now: all of it when finished, else all but a tail
// that could still become the start of a stop sequence.
size_t StreamableLength(const std::string& text, const std::vector<std::string>& stop, bool finished);

struct ResponseInfo {
  std::string id;
  int64_t created = 0;
  std::string model;
  int prompt_tokens = 0;
};

// The whole response of a finished request.
nlohmann::json CompletionResponse(const CompletionRequest& req, const ResponseInfo& info, const FinalText& text,
                                  const RequestView& view);
// One stream chunk carrying `delta` (chat: the first also carries the role); finish_reason
// set when `finish` is non-empty.
nlohmann::json StreamChunk(const CompletionRequest& req, const ResponseInfo& info, const std::string& delta,
                           bool first, const std::string& finish);
// The final usage chunk (stream_options.include_usage).
nlohmann::json UsageChunk(const CompletionRequest& req, const ResponseInfo& info, int completion_tokens,
                          const RequestView& view);
// POST /admin/layout: {"layout": [tp, ...]} (1 to 1024 instances, each TP degree 1 to 1024).
std::variant<std::vector<int>, ApiError> ParseLayoutRequest(std::string_view body);

// POST /tokenize: {"prompt": string, "add_special_tokens"?: bool, "model"?: string}
// (vLLM's shape); the answer is {"tokens": [...], "count": n, "max_model_len": context}.
struct TokenizeRequest {
  std::string text;
  bool add_special_tokens = false;
};
std::variant<TokenizeRequest, ApiError> ParseTokenizeRequest(std::string_view body, const ApiLimits& limits);
// POST /detokenize: {"tokens": [id, ...], "model"?: string}; every id within the vocabulary.
std::variant<std::vector<int32_t>, ApiError> ParseDetokenizeRequest(std::string_view body, const ApiLimits& limits,
                                                                    int32_t vocab_size);

// TeDiServe's extra response fields: steps, thresholds, SLO.
nlohmann::json ExtraFields(const CompletionRequest& req, const RequestView& view);

}  // namespace tediserve::serve
