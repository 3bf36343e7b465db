// TLS files (serve/tls.h): Tls::Load reads a certificate, its key and a CA certificate in PEM
// and parses them with OpenSSL. The fuzzer's bytes are all three files at once, so an input
// holding a certificate and its key (the seed) passes every check and mutations reach each.
#include "fuzz_util.h"
#include "serve/tls.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tediserve;
  const std::string path = fuzz::WriteInput(data, size, "tls.pem");
  (void)serve::Tls::Load({path, path, path});
  return 0;
}
