#include "serve/tls.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <cstdlib>
#include <fstream>

namespace tediserve::serve {
namespace {

namespace fs = std::filesystem;

class TlsTest : public ::testing::Test {
 protected:
  // Two self-signed certificates with their keys (cert.pem / key.pem, other.pem / other.key),
  // made with the openssl command (scripts/setup.sh test installs it).
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("tedi_tls_unit_" + std::to_string(getpid()));
    fs::create_directories(dir_);
    for (const auto& [cert, key] : {std::pair<std::string, std::string>{"cert.pem", "key.pem"}, {"other.pem", "other.key"}}) {
      const std::string cmd = "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 "
                              "-subj /CN=tedi -keyout " + P(key) + " -out " + P(cert) + " >/dev/null 2>&1";
      ASSERT_EQ(std::system(cmd.c_str()), 0) << "needs the openssl command";
    }
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string Write(const std::string& name, const std::string& text) {
    std::ofstream(dir_ / name) << text;
    return (dir_ / name).string();
  }
  std::string P(const std::string& name) const { return (dir_ / name).string(); }
  fs::path dir_;
};

TEST_F(TlsTest, OffWithoutFiles) {
  auto t = Tls::Load({});
  ASSERT_TRUE(t.ok());
  EXPECT_FALSE(t->enabled());
  EXPECT_TRUE(t->files().Args().empty());
  EXPECT_NE(t->ServerCredentials(), nullptr);
  EXPECT_NE(t->ChannelCredentials(), nullptr);
}

TEST_F(TlsTest, AllThreeOrNone) {
  for (TlsFiles f : {TlsFiles{P("cert.pem"), "", ""}, TlsFiles{"", P("key.pem"), ""}, TlsFiles{P("cert.pem"), P("key.pem"), ""}}) {
    auto t = Tls::Load(f);
    ASSERT_FALSE(t.ok());
    EXPECT_NE(t.status().message().find("go together"), std::string::npos) << t.status().message();
  }
}

TEST_F(TlsTest, FilesAreCheckedAndMadeAbsolute) {
  auto t = Tls::Load({P("cert.pem"), P("key.pem"), P("cert.pem")});
  ASSERT_TRUE(t.ok()) << t.status().message();
  EXPECT_TRUE(t->enabled());
  EXPECT_EQ(t->files().Args(), (std::vector<std::string>{"--tls-cert", P("cert.pem"), "--tls-key", P("key.pem"),
                                                         "--tls-ca", P("cert.pem")}));
  // Relative paths become absolute (children may start elsewhere).
  const fs::path cwd = fs::current_path();
  fs::current_path(dir_);
  auto rel = Tls::Load({"cert.pem", "key.pem", "cert.pem"});
  fs::current_path(cwd);
  ASSERT_TRUE(rel.ok()) << rel.status().message();
  EXPECT_EQ(rel->files().cert, P("cert.pem"));

  auto missing = Tls::Load({P("cert.pem"), P("key.pem"), P("nope.pem")});
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("--tls-ca"), std::string::npos);
  // A key where the certificate goes, and a certificate where the key goes.
  auto swapped = Tls::Load({P("key.pem"), P("cert.pem"), P("cert.pem")});
  ASSERT_FALSE(swapped.ok());
  EXPECT_NE(swapped.status().message().find("--tls-cert"), std::string::npos) << swapped.status().message();
  EXPECT_FALSE(Tls::Load({P("cert.pem"), P("cert.pem"), P("cert.pem")}).ok());
  // PEM armour around something that is not a certificate or key, and a key of another
  // certificate.
  const std::string junk_cert = Write("junk.pem", "-----BEGIN CERTIFICATE-----\nZm9vYmFy\n-----END CERTIFICATE-----\n");
  const std::string junk_key = Write("junk.key", "-----BEGIN PRIVATE KEY-----\nZm9vYmFy\n-----END PRIVATE KEY-----\n");
  auto bad_cert = Tls::Load({junk_cert, P("key.pem"), P("cert.pem")});
  ASSERT_FALSE(bad_cert.ok());
  EXPECT_NE(bad_cert.status().message().find("--tls-cert"), std::string::npos) << bad_cert.status().message();
  auto bad_ca = Tls::Load({P("cert.pem"), P("key.pem"), junk_cert});
  ASSERT_FALSE(bad_ca.ok());
  EXPECT_NE(bad_ca.status().message().find("--tls-ca"), std::string::npos) << bad_ca.status().message();
  auto bad_key = Tls::Load({P("cert.pem"), junk_key, P("cert.pem")});
  ASSERT_FALSE(bad_key.ok());
  EXPECT_NE(bad_key.status().message().find("no private key"), std::string::npos) << bad_key.status().message();
  auto wrong_key = Tls::Load({P("cert.pem"), P("other.key"), P("cert.pem")});
  ASSERT_FALSE(wrong_key.ok());
  EXPECT_NE(wrong_key.status().message().find("is not the key of"), std::string::npos) << wrong_key.status().message();
  EXPECT_TRUE(Tls::Load({P("other.pem"), P("other.key"), P("cert.pem")}).ok());
  // Not text at all, and too large.
  EXPECT_FALSE(Tls::Load({Write("bin.pem", std::string("\x00\x01\x02", 3)), P("key.pem"), P("cert.pem")}).ok());
  EXPECT_FALSE(
      Tls::Load({Write("big.pem", "-----BEGIN CERTIFICATE-----\n" + std::string(2 << 20, 'A')), P("key.pem"), P("cert.pem")})
          .ok());
  // A folder is not a file.
  EXPECT_FALSE(Tls::Load({dir_.string(), P("key.pem"), P("cert.pem")}).ok());
}

}  // namespace
}  // namespace tediserve::serve
