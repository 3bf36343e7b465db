// tokenizer.json: Tokenizer::FromJson; an accepted tokenizer then encodes and decodes text
// (including text its vocabulary does not cover).
#include "engine/tokenizer.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tediserve;
  StatusOr<engine::Tokenizer> tok = engine::Tokenizer::FromJson(std::string(fuzz::AsText(data, size)));
  if (!tok.ok()) return 0;
  for (const char* text : {"12+34=", "a b\n", "\xff\xfe", ""}) {
    StatusOr<std::vector<int32_t>> ids = tok->Encode(text);
    if (ids.ok()) {
      for (int32_t id : *ids)
        if (id < 0 || id >= tok->vocab_size()) __builtin_trap();
      (void)tok->Decode(*ids);
    }
  }
  (void)tok->Decode({0, 1, -5, 1 << 30, tok->vocab_size()}, -1);
  return 0;
}
