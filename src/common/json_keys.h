// Duplicate-key detection for JSON inputs. nlohmann::json keeps the last of two equal keys
// in one object without a word, so `"n_layers": 4, "n_layers": 1000000000` in a config.json
// silently means a billion layers. Parsers of files where that ambiguity matters (model
// config.json, tokenizer.json, safetensors headers) call this after ParseJson succeeded
// (so the text is valid JSON whose depth is already bounded).
#pragma once

#include <string>
#include <string_view>

#include "common/status.h"

namespace tediserve {

// InvalidArgument "<where>: key 'K' appears twice in one object (at <path>)" for the first
// duplicate; Ok when every object's keys are distinct. `text` must already have passed
// ParseJson (invalid JSON is reported as such, without a position).
Status CheckNoDuplicateKeys(std::string_view text, const std::string& where);

}  // namespace tediserve
