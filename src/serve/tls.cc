#include "serve/tls.h"

#include <grpcpp/security/server_credentials.h>

#include <filesystem>
#include <fstream>
#include <iterator>

namespace tediserve::serve {
namespace {

constexpr std::uintmax_t kMaxPemBytes = 1 << 20;

StatusOr<std::string> ReadPem(const std::string& path, const std::string& flag, const std::string& must_contain) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return NotFound(flag + " " + path + ": no such file");
  const std::uintmax_t size = std::filesystem::file_size(path, ec);
  if (ec || size > kMaxPemBytes) return InvalidArgument(flag + " " + path + ": larger than 1 MiB, not a PEM file");
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound(flag + " " + path + ": cannot read it");
  std::string text((std::istreambuf_iterator<char>(in)), {});
  if (text.find("-----BEGIN ") == std::string::npos || text.find(must_contain) == std::string::npos)
    return InvalidArgument(flag + " " + path + ": not a PEM file with a " + must_contain);
  return text;
}

}  // namespace

std::vector<std::string> TlsFiles::Args() const {
  if (!enabled()) return {};
  return {"--tls-cert", cert, "--tls-key", key, "--tls-ca", ca};
}

StatusOr<Tls> Tls::Load(TlsFiles files) {
  Tls t;
  if (!files.enabled()) return t;
  if (files.cert.empty() || files.key.empty() || files.ca.empty())
    return InvalidArgument("--tls-cert, --tls-key and --tls-ca go together: give all three or none");
  for (std::string* p : {&files.cert, &files.key, &files.ca}) {
    std::error_code ec;
    const std::filesystem::path abs = std::filesystem::absolute(*p, ec);
    if (!ec) *p = abs.lexically_normal().string();
  }
  ASSIGN_OR_RETURN(t.cert_, ReadPem(files.cert, "--tls-cert", "CERTIFICATE"));
  ASSIGN_OR_RETURN(t.key_, ReadPem(files.key, "--tls-key", "PRIVATE KEY"));
  ASSIGN_OR_RETURN(t.ca_, ReadPem(files.ca, "--tls-ca", "CERTIFICATE"));
  t.files_ = std::move(files);
  return t;
}

std::shared_ptr<grpc::ServerCredentials> Tls::ServerCredentials() const {
  if (!enabled()) return grpc::InsecureServerCredentials();
  grpc::SslServerCredentialsOptions o(GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  o.pem_root_certs = ca_;
  o.pem_key_cert_pairs.push_back({key_, cert_});
  return grpc::SslServerCredentials(o);
}

std::shared_ptr<grpc::ChannelCredentials> Tls::ChannelCredentials() const {
  if (!enabled()) return grpc::InsecureChannelCredentials();
  grpc::SslCredentialsOptions o;
  o.pem_root_certs = ca_;
  o.pem_private_key = key_;
  o.pem_cert_chain = cert_;
  return grpc::SslCredentials(o);
}

}  // namespace tediserve::serve
