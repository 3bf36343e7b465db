// TLS between the scheduler, its agents and their workers (docs/design.md section 5): off
// unless the operator gives a certificate, its key and the CA that signed every process's
// certificate. Then every link is mutual TLS: each server (the scheduler's agent hub, each
// worker) accepts only clients whose certificate the CA signed, and each client checks that
// the server's certificate does and names the address it dialled (a subjectAltName IP or DNS
// entry). The cluster token stays on top of it.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <grpcpp/security/credentials.h>
#include <grpcpp/security/server_credentials.h>

#include "common/status.h"

namespace tediserve::serve {

// Paths to PEM files (all empty: no TLS).
struct TlsFiles {
  std::string cert;  // this process's certificate (chain)
  std::string key;   // its private key
  std::string ca;    // the CA certificate(s) every peer's certificate must chain to
  bool enabled() const { return !cert.empty() || !key.empty() || !ca.empty(); }
  // "--tls-cert C --tls-key K --tls-ca A" for a child process (nothing when off).
  std::vector<std::string> Args() const;
};

class Tls {
 public:
  // Reads and checks the files: all three or none, each a readable PEM file of at most 1 MiB
  // (the key a private key). Relative paths are made absolute, so children started elsewhere
  // find them.
  static StatusOr<Tls> Load(TlsFiles files);
  bool enabled() const { return files_.enabled(); }
  const TlsFiles& files() const { return files_; }
  std::shared_ptr<grpc::ServerCredentials> ServerCredentials() const;
  std::shared_ptr<grpc::ChannelCredentials> ChannelCredentials() const;

 private:
  TlsFiles files_;
  std::string cert_, key_, ca_;  // PEM text
};

}  // namespace tediserve::serve
