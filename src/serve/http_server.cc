#include "serve/http_server.h"

#include <httplib.h>

#include <arpa/inet.h>
#include <dirent.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <optional>

#include "common/input.h"
#include "serve/openai_api.h"

namespace tediserve::serve {
namespace {

using nlohmann::json;

void SendError(httplib::Response& res, const ApiError& e, Metrics* m) {
  res.status = e.status;
  res.set_content(ErrorBody(e), "application/json");
  if (m) m->Add("tediserve_http_errors_total", 1, {{"status", std::to_string(e.status)}});
}

ApiError FromStatus(const Status& s) {
  ApiError e;
  e.message = s.message();
  switch (s.code()) {
    case StatusCode::kResourceExhausted:
      e.status = 429;
      e.type = "rate_limit_error";
      e.code = "queue_full";
      break;
    case StatusCode::kUnavailable:
      e.status = 503;
      e.type = "server_error";
      break;
    case StatusCode::kInvalidArgument:
    case StatusCode::kOutOfRange:
      e.status = 400;
      break;
    default:
      e.status = 500;
      e.type = "server_error";
  }
  return e;
}

// The error for a request that left without completing (and was not cut by a stop sequence).
ApiError FromRecord(const host::RequestRecord& r) {
  ApiError e;
  e.message = r.reason.empty() ? std::string("the request ended: ") + host::OutcomeName(r.outcome) : r.reason;
  switch (r.outcome) {
    case host::Outcome::kRejected:
      e.status = r.reason.find("admission") != std::string::npos || r.reason.find("full") != std::string::npos ||
                         r.reason.find("live") != std::string::npos
                     ? 429
                     : 400;
      e.type = e.status == 429 ? "rate_limit_error" : "invalid_request_error";
      break;
    case host::Outcome::kCancelled:
      e.status = 499;
      e.type = "server_error";
      break;
    default:
      e.status = 503;
      e.type = "server_error";
  }
  return e;
}

std::string Sse(const json& j) { return "data: " + j.dump() + "\n\n"; }

// The address of a peer as a sockaddr, from cpp-httplib's strings; false if it is not one.
bool ToSockaddr(const std::string& addr, int port, sockaddr_storage* out) {
  std::memset(out, 0, sizeof(*out));
  auto* v4 = reinterpret_cast<sockaddr_in*>(out);
  auto* v6 = reinterpret_cast<sockaddr_in6*>(out);
  if (inet_pton(AF_INET, addr.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(static_cast<uint16_t>(port));
    return true;
  }
  if (inet_pton(AF_INET6, addr.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(static_cast<uint16_t>(port));
    return true;
  }
  return false;
}

bool SameEndpoint(const sockaddr_storage& a, const sockaddr_storage& b) {
  if (a.ss_family != b.ss_family) return false;
  if (a.ss_family == AF_INET) {
    const auto& x = reinterpret_cast<const sockaddr_in&>(a);
    const auto& y = reinterpret_cast<const sockaddr_in&>(b);
    return x.sin_port == y.sin_port && x.sin_addr.s_addr == y.sin_addr.s_addr;
  }
  const auto& x = reinterpret_cast<const sockaddr_in6&>(a);
  const auto& y = reinterpret_cast<const sockaddr_in6&>(b);
  return x.sin6_port == y.sin6_port && std::memcmp(&x.sin6_addr, &y.sin6_addr, sizeof(x.sin6_addr)) == 0;
}

// The kernel's state of the TCP connection with these two ends, asked of sock_diag by the
// four-tuple (one lookup, no descriptor needed): 1 established, 0 not (the peer closed or
// reset it: the lookup finds it in another state, only the listener, or nothing), -1 the
// kernel cannot say (no sock_diag here).
int TcpEstablished(const sockaddr_storage& local, const sockaddr_storage& peer) {
  struct {
    nlmsghdr nlh;
    inet_diag_req_v2 req;
  } q{};
  q.nlh.nlmsg_len = sizeof(q);
  q.nlh.nlmsg_type = SOCK_DIAG_BY_FAMILY;
  q.nlh.nlmsg_flags = NLM_F_REQUEST;  // one socket, not a dump
  q.req.sdiag_family = static_cast<uint8_t>(local.ss_family);
  q.req.sdiag_protocol = IPPROTO_TCP;
  q.req.idiag_states = ~0u;
  q.req.id.idiag_cookie[0] = q.req.id.idiag_cookie[1] = INET_DIAG_NOCOOKIE;
  if (local.ss_family == AF_INET) {  // "source" is this side, "destination" the client
    const auto& l = reinterpret_cast<const sockaddr_in&>(local);
    const auto& p = reinterpret_cast<const sockaddr_in&>(peer);
    q.req.id.idiag_sport = l.sin_port;
    q.req.id.idiag_dport = p.sin_port;
    q.req.id.idiag_src[0] = l.sin_addr.s_addr;
    q.req.id.idiag_dst[0] = p.sin_addr.s_addr;
  } else {
    const auto& l = reinterpret_cast<const sockaddr_in6&>(local);
    const auto& p = reinterpret_cast<const sockaddr_in6&>(peer);
    q.req.id.idiag_sport = l.sin6_port;
    q.req.id.idiag_dport = p.sin6_port;
    std::memcpy(q.req.id.idiag_src, &l.sin6_addr, sizeof(l.sin6_addr));
    std::memcpy(q.req.id.idiag_dst, &p.sin6_addr, sizeof(p.sin6_addr));
  }
  const int fd = socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
  if (fd < 0) return -1;
  sockaddr_nl kernel{};
  kernel.nl_family = AF_NETLINK;
  int answer = -1;
  alignas(nlmsghdr) char buf[4096];
  timeval tv{1, 0};  // the kernel answers at once; never wait long on it
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  if (sendto(fd, &q, sizeof(q), 0, reinterpret_cast<sockaddr*>(&kernel), sizeof(kernel)) == sizeof(q)) {
    const ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n > 0) {
      const auto* h = reinterpret_cast<const nlmsghdr*>(buf);
      int len = static_cast<int>(n);
      if (NLMSG_OK(h, len)) {
        if (h->nlmsg_type == SOCK_DIAG_BY_FAMILY &&
            h->nlmsg_len >= NLMSG_LENGTH(sizeof(inet_diag_msg))) {
          answer = reinterpret_cast<const inet_diag_msg*>(NLMSG_DATA(h))->idiag_state == TCP_ESTABLISHED ? 1 : 0;
        } else if (h->nlmsg_type == NLMSG_ERROR && h->nlmsg_len >= NLMSG_LENGTH(sizeof(nlmsgerr))) {
          if (reinterpret_cast<const nlmsgerr*>(NLMSG_DATA(h))->error == -ENOENT) answer = 0;
        }
      }
    }
  }
  close(fd);
  return answer;
}

// The client connection a request came on, so a handler that is not streaming can tell when
// its client hangs up (cpp-httplib 0.11 gives a handler no socket, only the two addresses).
// The kernel is asked for the state of the connection with those two ends (sock_diag); where
// it cannot say, the socket is found once among this process's descriptors (a scan of every
// descriptor: with hundreds of connections open it was a seventh of the server's CPU samples
// under overload, so it is the fallback only).
class Connection {
 public:
  explicit Connection(const httplib::Request& req) {
    ok_ = ToSockaddr(req.remote_addr, req.remote_port, &peer_) && ToSockaddr(req.local_addr, req.local_port, &local_);
  }

  // True once the client has closed the connection (or it broke). A descriptor that no longer
  // has the request's two ends (closed and reused) is looked for again.
  bool HungUp() {
    if (!ok_) return false;
    if (diag_) {
      const int established = TcpEstablished(local_, peer_);
      if (established >= 0) return established == 0;
      diag_ = false;  // no sock_diag here: look for the descriptor instead
    }
    if (fd_ < 0 || !Matches(fd_)) fd_ = Find();
    if (fd_ < 0) return false;  // not found: say nothing rather than cancel a live request
    char c = 0;
    const ssize_t n = recv(fd_, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n == 0) return true;
    return n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;
  }

 private:
  bool Matches(int fd) const {
    sockaddr_storage a{}, b{};
    socklen_t la = sizeof(a), lb = sizeof(b);
    if (getpeername(fd, reinterpret_cast<sockaddr*>(&a), &la) != 0) return false;
    if (!SameEndpoint(a, peer_)) return false;
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&b), &lb) != 0) return false;
    return SameEndpoint(b, local_);
  }
  int Find() const {
    DIR* d = opendir("/proc/self/fd");
    if (d == nullptr) return -1;
    int found = -1;
    while (dirent* e = readdir(d)) {
      char* end = nullptr;
      const long fd = std::strtol(e->d_name, &end, 10);
      if (end == e->d_name || *end != '\0' || fd == dirfd(d)) continue;
      if (Matches(static_cast<int>(fd))) {
        found = static_cast<int>(fd);
        break;
      }
    }
    closedir(d);
    return found;
  }

  sockaddr_storage peer_{}, local_{};
  bool ok_ = false;
  bool diag_ = true;  // ask sock_diag (until it cannot answer)
  int fd_ = -1;
};

// A non-streaming request looks for its client's hang-up after this long (most requests are
// over before: they pay nothing for the check), then at each step or every quarter second.
constexpr double kHangUpCheckAfterS = 0.5;

}  // namespace

HttpServer::HttpServer(Runtime* runtime, HttpOptions options)
    : rt_(runtime), options_(std::move(options)), svr_(std::make_unique<httplib::Server>()) {
  const int threads = std::max(4, options_.threads);
  svr_->new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };
  svr_->set_payload_max_length(options_.max_body_bytes);
  svr_->set_keep_alive_timeout(options_.keep_alive_s);
  svr_->set_read_timeout(options_.read_timeout_s, 0);
  svr_->set_write_timeout(30, 0);
  svr_->set_tcp_nodelay(true);
  svr_->set_socket_options([this](socket_t sock) {
    httplib::default_socket_options(sock);
    listen_fd_ = static_cast<int>(sock);  // the last socket created is the one bound
  });
  Routes();
}

HttpServer::~HttpServer() { Stop(); }

StatusOr<int> HttpServer::Bind() {
  int port = options_.port;
  if (port == 0) port = svr_->bind_to_any_port(options_.host);
  else if (!svr_->bind_to_port(options_.host, port)) port = -1;
  if (port <= 0)
    return Unavailable("cannot listen on " + options_.host + ":" + std::to_string(options_.port) +
                       " (in use, or not an address of this machine)");
  // cpp-httplib listens with a backlog of 5: a burst of connections would see SYNs dropped
  // and retried a second later. listen() again raises it.
  if (listen_fd_ >= 0) ::listen(listen_fd_, SOMAXCONN);
  return port;
}

void HttpServer::Serve() { svr_->listen_after_bind(); }
void HttpServer::Stop() {
  if (svr_) svr_->stop();
}

void HttpServer::Routes() {
  Runtime* rt = rt_;
  Metrics* m = &rt->metrics();
  const std::string key = options_.api_key;
  auto authorized = [key](const httplib::Request& req) {
    return key.empty() || req.get_header_value("Authorization") == "Bearer " + key;
  };
  ApiLimits limits;
  limits.model_name = rt->model_name();
  limits.context = rt->config().max_seq_len;
  limits.default_gen_length = rt->default_gen_length();
  limits.block_size = rt->block_size();
  limits.max_prompt_chars = options_.max_prompt_chars;
  limits.mask_id = rt->config().mask_token_id;
  limits.chat_template = options_.chat_template;
  limits.chat_defaults = options_.chat_defaults;

  svr_->Get("/health", [rt](const httplib::Request&, httplib::Response& res) {
    const int up = rt->instances_up();
    res.status = up > 0 ? 200 : 503;
    json agents = json::array();
    for (const AgentInfo& a : rt->Agents())
      agents.push_back({{"node", a.node}, {"pid", a.pid}, {"devices", a.devices.size()}});
    res.set_content(json({{"status", up > 0 ? "ok" : "no worker up"}, {"instances_up", up}, {"agents", agents}}).dump(),
                    "application/json");
  });
  svr_->Get("/metrics", [m](const httplib::Request&, httplib::Response& res) {
    res.set_content(m->Render(), "text/plain; version=0.0.4");
  });
  svr_->Get("/v1/models", [rt, authorized, m](const httplib::Request& req, httplib::Response& res) {
    if (!authorized(req)) {
      ApiError e{401, "missing or wrong API key (Authorization: Bearer ...)", "invalid_request_error", "", "invalid_api_key"};
      return SendError(res, e, m);
    }
    json model = {{"id", rt->model_name()}, {"object", "model"}, {"created", 0}, {"owned_by", "tediserve"}};
    res.set_content(json({{"object", "list"}, {"data", json::array({model})}}).dump(), "application/json");
  });

  auto unauthorized = [m](httplib::Response& res) {
    ApiError e{401, "missing or wrong API key (Authorization: Bearer ...)", "invalid_request_error", "", "invalid_api_key"};
    SendError(res, e, m);
  };
  auto instances_json = [rt] {
    json out = json::array();
    for (const Runtime::InstanceView& v : rt->Instances())
      out.push_back({{"id", v.id}, {"tp", v.tp}, {"node", v.node}, {"devices", v.devices}, {"state", v.state}});
    return out;
  };
  // The layout: GET shows the instances, POST {"layout": [...]} moves to another one.
  svr_->Get("/admin/layout", [authorized, unauthorized, instances_json](const httplib::Request& req,
                                                                          httplib::Response& res) {
    if (!authorized(req)) return unauthorized(res);
    res.set_content(json({{"instances", instances_json()}}).dump(), "application/json");
  });
  svr_->Post("/admin/layout", [rt, m, authorized, unauthorized, instances_json](const httplib::Request& req,
                                                                                  httplib::Response& res) {
    if (!authorized(req)) return unauthorized(res);
    auto parsed = ParseLayoutRequest(req.body);
    if (auto* e = std::get_if<ApiError>(&parsed)) return SendError(res, *e, m);
    auto change = rt->ChangeLayout(std::get<std::vector<int>>(parsed));
    if (!change.ok()) {
      ApiError e = FromStatus(change.status());
      e.param = e.status == 400 ? "layout" : "";
      return SendError(res, e, m);
    }
    res.status = 202;  // accepted: drains and starts go on in the background
    res.set_content(json({{"keep", change->keep},
                          {"drain", change->drain},
                          {"launch", change->launch},
                          {"instances", instances_json()}})
                        .dump(),
                    "application/json");
  });
  // Tokenizer endpoints (vLLM's shapes).
  svr_->Post("/tokenize", [rt, m, authorized, unauthorized, limits](const httplib::Request& req, httplib::Response& res) {
    if (!authorized(req)) return unauthorized(res);
    auto parsed = ParseTokenizeRequest(req.body, limits);
    if (auto* e = std::get_if<ApiError>(&parsed)) return SendError(res, *e, m);
    const TokenizeRequest& t = std::get<TokenizeRequest>(parsed);
    auto ids = rt->tokenizer().Encode(t.text, t.add_special_tokens);
    if (!ids.ok()) return SendError(res, ApiError{400, ids.status().message(), "invalid_request_error", "prompt", ""}, m);
    res.set_content(json({{"tokens", *ids}, {"count", ids->size()}, {"max_model_len", limits.context}}).dump(),
                    "application/json");
  });
  svr_->Post("/detokenize", [rt, m, authorized, unauthorized, limits](const httplib::Request& req,
                                                                      httplib::Response& res) {
    if (!authorized(req)) return unauthorized(res);
    auto parsed = ParseDetokenizeRequest(req.body, limits, rt->tokenizer().vocab_size());
    if (auto* e = std::get_if<ApiError>(&parsed)) return SendError(res, *e, m);
    const std::string text = rt->tokenizer().DecodeAll(std::get<std::vector<int32_t>>(parsed));
    res.set_content(json({{"prompt", SanitizeUtf8(text)}}).dump(), "application/json");
  });

  auto completion = [rt, authorized, limits, m](const httplib::Request& req, httplib::Response& res, bool chat) {
    if (!authorized(req)) {
      ApiError e{401, "missing or wrong API key (Authorization: Bearer ...)", "invalid_request_error", "", "invalid_api_key"};
      return SendError(res, e, m);
    }
    auto parsed = ParseCompletionRequest(req.body, chat, limits, rt->tokenizer());
    if (auto* e = std::get_if<ApiError>(&parsed)) return SendError(res, *e, m);
    auto creq = std::make_shared<CompletionRequest>(std::move(std::get<CompletionRequest>(parsed)));
    creq->params.every_step = creq->stream || !creq->stop.empty();
    auto ch = rt->Submit(creq->params);
    if (!ch.ok()) {
      if (ch.status().code() == StatusCode::kResourceExhausted) res.set_header("Retry-After", "1");
      return SendError(res, FromStatus(ch.status()), m);
    }
    std::shared_ptr<RequestChannel> channel = *ch;
    ResponseInfo info{(chat ? "chatcmpl-" : "cmpl-") + std::to_string(channel->id()),
                      static_cast<int64_t>(std::time(nullptr)), rt->model_name(),
                      static_cast<int>(creq->params.prompt.size())};
    const int32_t mask = rt->config().mask_token_id;
    if (!creq->stream) {
      RequestView v;
      bool cut = false;
      Connection conn(req);
      const auto since = std::chrono::steady_clock::now();
      while (true) {
        const bool changed = channel->Wait(v.version, 0.25, &v);
        if (v.done) break;
        if (!cut && std::chrono::steady_clock::now() - since > std::chrono::duration<double>(kHangUpCheckAfterS) &&
            conn.HungUp()) {
          rt->Cancel(channel->id());  // the client went away: nobody will read the answer
          cut = true;
          continue;
        }
        // Nothing new yet (still queued: before its first step the view has no output, which
        // TextOf would take for a finished empty text and cut): wait on.
        if (!changed) continue;
        if (!cut && TextOf(v.output, rt->tokenizer(), mask, creq->stop).finished) {
          rt->Cancel(channel->id());  // a stop sequence or EOS: nothing after it matters
          cut = true;
        }
      }
      const FinalText t = TextOf(v.output, rt->tokenizer(), mask, creq->stop);
      const bool ok = v.record.outcome == host::Outcome::kCompleted ||
                      (v.record.outcome == host::Outcome::kCancelled && t.finished);
      if (!ok) {
        if (v.record.outcome == host::Outcome::kRejected) res.set_header("Retry-After", "1");
        return SendError(res, FromRecord(v.record), m);
      }
      res.set_content(CompletionResponse(*creq, info, t, v).dump(), "application/json");
      return;
    }
    // Streaming: a request refused at once gets a status code, not a stream.
    RequestView first;
    channel->Wait(0, 0.05, &first);
    if (first.done && first.record.outcome == host::Outcome::kRejected) {
      res.set_header("Retry-After", "1");
      return SendError(res, FromRecord(first.record), m);
    }
    struct StreamState {
      uint64_t seen = 0;
      size_t sent = 0;
      bool first = true;
      bool cancelled = false;
      std::optional<RequestView> pending;  // the first look took its canvases: send them first
    };
    auto st = std::make_shared<StreamState>();
    if (first.version > 0) st->pending = std::move(first);  // else nothing happened yet
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        "text/event-stream",
        [rt, creq, info, channel, st, mask](size_t, httplib::DataSink& sink) {
          auto write = [&](const std::string& s) {
            if (!sink.is_writable() || !sink.write(s.data(), s.size())) {
              rt->Cancel(channel->id());  // the client went away
              return false;
            }
            return true;
          };
          RequestView v;
          if (st->pending) {
            v = std::move(*st->pending);
            st->pending.reset();
          } else if (!channel->Wait(st->seen, 2.0, &v)) {
            return write(": keep-alive\n\n");
          }
          st->seen = v.version;
          for (const auto& c : v.canvases) {
            json cj = {{"id", info.id}, {"object", "tediserve.canvas"}, {"model", info.model}};
            json pos = json::array();
            std::string text;
            for (size_t p = 0; p < c.size(); ++p) {
              const bool fin = c[p] != mask;
              pos.push_back(fin);
              text += fin ? rt->tokenizer().Decode({c[p]}, -1) : std::string("_");
            }
            cj["canvas"] = SanitizeUtf8(text);
            cj["final"] = pos;
            if (!write("event: canvas\n" + Sse(cj))) return false;
          }
          const FinalText t = TextOf(v.output, rt->tokenizer(), mask, creq->stop);
          const size_t n = StreamableLength(t.text, creq->stop, t.finished);
          if (n > st->sent) {
            if (!write(Sse(StreamChunk(*creq, info, t.text.substr(st->sent, n - st->sent), st->first, "")))) return false;
            st->sent = n;
            st->first = false;
          }
          if (t.finished && !v.done && !st->cancelled) {
            rt->Cancel(channel->id());
            st->cancelled = true;
          }
          if (!v.done) return true;
          const bool ok = v.record.outcome == host::Outcome::kCompleted ||
                          (v.record.outcome == host::Outcome::kCancelled && t.finished);
          if (!ok) {
            const ApiError e = FromRecord(v.record);
            if (!write(Sse(json::parse(ErrorBody(e))))) return false;
          } else {
            const std::string finish = (t.eos || t.stopped) ? "stop" : "length";
            if (!write(Sse(StreamChunk(*creq, info, "", st->first, finish)))) return false;
            if (creq->include_usage && !write(Sse(UsageChunk(*creq, info, t.tokens, v)))) return false;
          }
          if (!write("data: [DONE]\n\n")) return false;
          sink.done();
          return true;
        });
  };
  svr_->Post("/v1/completions", [completion](const httplib::Request& q, httplib::Response& r) { completion(q, r, false); });
  svr_->Post("/v1/chat/completions",
             [completion](const httplib::Request& q, httplib::Response& r) { completion(q, r, true); });

  svr_->set_error_handler([m](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    ApiError e;
    e.status = res.status;
    if (res.status == 404) e.message = "no such endpoint: " + req.method + " " + req.path;
    else if (res.status == 413) e.message = "the request body is too large";
    else if (res.status == 405) e.message = "method not allowed";
    else e.message = "bad request";
    SendError(res, e, m);
  });
  svr_->set_exception_handler([m](const httplib::Request&, httplib::Response& res, std::exception_ptr) {
    ApiError e{500, "internal error", "server_error", "", ""};
    SendError(res, e, m);
  });
}

}  // namespace tediserve::serve
