#include "pooler/net/resolver.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/un.h>

#include <cstring>
#include <utility>

#include "pooler/base/strings.h"

namespace pgfleet::net {
namespace {

bool IsNumeric(const std::string& host) {
  in6_addr v6;
  in_addr v4;
  return inet_pton(AF_INET, host.c_str(), &v4) == 1 || inet_pton(AF_INET6, host.c_str(), &v6) == 1;
}

}  // namespace

bool ResolvedAddress::operator==(const ResolvedAddress& other) const {
  return length == other.length && std::memcmp(&storage, &other.storage, length) == 0;
}

absl::StatusOr<std::vector<ResolvedAddress>> ResolveAll(const std::string& host, int port) {
  std::vector<ResolvedAddress> out;
  if (!host.empty() && host[0] == '/') {
    const std::string path = base::StrCat(host, "/.s.PGSQL.", port);
    sockaddr_un addr = {};
    addr.sun_family = AF_UNIX;
    if (path.size() >= sizeof(addr.sun_path)) {
      return absl::InvalidArgumentError("unix socket path too long");
    }
    std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
    ResolvedAddress& one = out.emplace_back();
    std::memcpy(&one.storage, &addr, sizeof(addr));
    one.length = sizeof(addr);
    return out;
  }
  addrinfo hints = {};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* res = nullptr;
  const int gai = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res);
  if (gai != 0) {
    return absl::UnavailableError(base::StrCat("cannot resolve ", host, ": ", gai_strerror(gai)));
  }
  for (const addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
    ResolvedAddress& one = out.emplace_back();
    std::memcpy(&one.storage, ai->ai_addr, ai->ai_addrlen);
    one.length = ai->ai_addrlen;
  }
  freeaddrinfo(res);
  return out;
}

absl::StatusOr<ResolvedAddress> ResolveNow(const std::string& host, int port) {
  auto all = ResolveAll(host, port);
  if (!all.ok()) return all.status();
  if (all->empty()) return absl::UnavailableError(base::StrCat("cannot resolve ", host));
  return all->front();
}

Resolver::Resolver(EventLoop& loop, Lookup lookup) : loop_(loop), lookup_(std::move(lookup)) {}

Resolver::~Resolver() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  // A lookup in getaddrinfo cannot be interrupted: a worker that stops during one waits for it
  // (the resolver's timeout bounds it).
  if (thread_.joinable()) thread_.join();
  *alive_ = false;
}

void Resolver::set_callbacks(std::function<void()> on_answer,
                             std::function<void(const std::string&, int)> on_change) {
  on_answer_ = std::move(on_answer);
  on_change_ = std::move(on_change);
}

Resolver::Answer Resolver::Resolve(const std::string& host, int port, const Ttls& ttls) {
  Answer answer;
  if ((!host.empty() && host[0] == '/') || IsNumeric(host)) {
    auto now = ResolveNow(host, port);  // no lookup: numbers and paths only
    if (now.ok()) {
      answer.state = State::kReady;
      answer.address = *now;
    } else {
      answer.state = State::kFailed;
      answer.error = std::string(now.status().message());
    }
    return answer;
  }
  Entry& entry = cache_[{host, port}];
  if (entry.answered) {
    const absl::Duration ttl = entry.result.ok() ? ttls.answer : ttls.failure;
    if (loop_.now() - entry.answered_at < ttl) {
      if (entry.result.ok() && !entry.result->empty()) {
        answer.state = State::kReady;
        answer.address = (*entry.result)[entry.next++ % entry.result->size()];
      } else {
        answer.state = State::kFailed;
        answer.error = entry.result.ok() ? base::StrCat("cannot resolve ", host)
                                         : std::string(entry.result.status().message());
      }
      return answer;
    }
  }
  if (!entry.in_flight) {
    entry.in_flight = true;
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.emplace_back(host, port);
    }
    if (!thread_.joinable()) thread_ = std::thread([this] { Run(); });
    wake_.notify_one();
  }
  return answer;  // kPending
}

void Resolver::Run() {
  // The thread only reads the queue and calls getaddrinfo; results go back through the loop.
  std::weak_ptr<bool> alive = alive_;
  EventLoop& loop = loop_;
  while (true) {
    std::pair<std::string, int> request;
    {
      std::unique_lock<std::mutex> lock(mu_);
      wake_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (stopping_) return;
      request = std::move(queue_.front());
      queue_.pop_front();
    }
    auto result = lookup_(request.first, request.second);
    loop.Post([this, alive, request = std::move(request), result = std::move(result)]() mutable {
      const auto still = alive.lock();
      if (still == nullptr || !*still) return;
      OnResult(request.first, request.second, std::move(result));
    });
  }
}

void Resolver::OnResult(const std::string& host, int port, absl::StatusOr<Addresses> result) {
  ++lookups_;
  Entry& entry = cache_[{host, port}];
  const bool changed =
      entry.answered && entry.result.ok() && result.ok() && !(*entry.result == *result);
  entry.in_flight = false;
  entry.answered = true;
  entry.answered_at = loop_.now();
  entry.result = std::move(result);
  if (changed && on_change_) on_change_(host, port);
  if (on_answer_) on_answer_();
}

}  // namespace pgfleet::net
