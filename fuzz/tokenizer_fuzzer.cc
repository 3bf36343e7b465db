// tokenizer.json: Tokenizer::FromJson (WordLevel and byte-level BPE: merges, normalizers,
// pre-tokenizer regexes, templates); an accepted tokenizer then encodes and decodes text
// (including text its vocabulary does not cover, and ill-formed UTF-8).
#include "engine/tokenizer.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tediserve;
  StatusOr<engine::Tokenizer> tok = engine::Tokenizer::FromJson(std::string(fuzz::AsText(data, size)));
  if (!tok.ok()) return 0;
  for (const char* text : {"12+34=", "a b\n", "\xff\xfe", "", "It's <|im_start|>caf\xc3\xa9 e\xcc\x81  \xe4\xbd\xa0 42\r\n"}) {
    for (bool add_special : {false, true}) {
      StatusOr<std::vector<int32_t>> ids = tok->Encode(text, add_special);
      if (ids.ok()) {
        for (int32_t id : *ids)
          if (id < 0 || id >= tok->vocab_size()) __builtin_trap();
        (void)tok->Decode(*ids);
        (void)tok->DecodeAll(*ids, add_special);
      }
    }
  }
  (void)tok->Decode({0, 1, -5, 1 << 30, tok->vocab_size()}, -1);
  return 0;
}
