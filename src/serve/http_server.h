// The HTTP front end: OpenAI-compatible /v1/completions and /v1/chat/completions (plain and
// SSE streaming), /v1/models, /health and /metrics over the Runtime (docs/design.md
// section 5). cpp-httplib, one thread per connection from a bounded pool; a handler parses
// and validates the body, submits to the runtime and waits on the request's channel.
#pragma once

#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "engine/chat_template.h"
#include "serve/runtime.h"

namespace httplib {
class Server;
}

namespace tediserve::serve {

struct HttpOptions {
  std::string host = "127.0.0.1";
  int port = 8000;                 // 0: any free port
  std::string api_key;             // non-empty: /v1/* needs "Authorization: Bearer <key>"
  size_t max_body_bytes = 1 << 20;
  int max_prompt_chars = 65536;
  int threads = 512;               // connections served at once (streams hold theirs)
  int keep_alive_s = 5;            // idle keep-alive connections close after this
  int read_timeout_s = 10;         // a client that sends its request slower is cut off
  std::shared_ptr<const engine::ChatTemplate> chat_template;  // none: chat messages concatenated
  nlohmann::ordered_json chat_defaults = nlohmann::ordered_json::object();
};

class HttpServer {
 public:
  HttpServer(Runtime* runtime, HttpOptions options);
  ~HttpServer();
  // Binds; returns the bound port (useful with port 0).
  StatusOr<int> Bind();
  // Serves until Stop (blocks).
  void Serve();
  void Stop();

 private:
  void Routes();
  Runtime* rt_;
  HttpOptions options_;
  std::unique_ptr<httplib::Server> svr_;
  int listen_fd_ = -1;  // the listening socket, once created (its backlog is raised after bind)
};

}  // namespace tediserve::serve
