#include "serve/tls.h"

#include <grpcpp/security/server_credentials.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

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

// The first certificate of a PEM text (nullptr: none OpenSSL can read).
X509* FirstCertificate(const std::string& pem) {
  BIO* bio = BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size()));
  if (bio == nullptr) return nullptr;
  X509* cert = PEM_read_bio_X509(bio, nullptr, nullptr, nullptr);
  BIO_free(bio);
  return cert;
}

// What gRPC will do with the files, done once here so a bad file is a clear error at start
// rather than a server that cannot listen: the certificate and the CA parse, the key parses
// and belongs to the certificate.
Status CheckPem(const TlsFiles& f, const std::string& cert, const std::string& key, const std::string& ca) {
  X509* c = FirstCertificate(cert);
  if (c == nullptr) return InvalidArgument("--tls-cert " + f.cert + ": no certificate OpenSSL can read");
  X509* a = FirstCertificate(ca);
  if (a == nullptr) {
    X509_free(c);
    return InvalidArgument("--tls-ca " + f.ca + ": no certificate OpenSSL can read");
  }
  X509_free(a);
  BIO* bio = BIO_new_mem_buf(key.data(), static_cast<int>(key.size()));
  EVP_PKEY* k = bio == nullptr ? nullptr : PEM_read_bio_PrivateKey(bio, nullptr, nullptr, nullptr);
  if (bio != nullptr) BIO_free(bio);
  Status s = Status::Ok();
  if (k == nullptr) {
    s = InvalidArgument("--tls-key " + f.key + ": no private key OpenSSL can read (an encrypted key is not supported)");
  } else if (X509_check_private_key(c, k) != 1) {
    s = InvalidArgument("--tls-key " + f.key + " is not the key of --tls-cert " + f.cert);
  }
  EVP_PKEY_free(k);
  X509_free(c);
  ERR_clear_error();  // OpenSSL's own queue: the message above says it
  return s;
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
  RETURN_IF_ERROR(CheckPem(files, t.cert_, t.key_, t.ca_));
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
