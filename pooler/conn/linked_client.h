// A client as its server sees it: the end of the link that ServerConn writes answers to, wakes
// when its own output drains, and reports the end of a lookup (auth_query, the check of its
// startup settings) to. ClientConn implements it;
// the server never includes client_conn.h, so the two shells have one direction between them
// (the client drives its server: client_conn.cc includes server_conn.h).
#pragma once

#include <string>
#include <string_view>
#include <utility>

#include "pooler/listen/listen_hub.h"
#include "pooler/net/connection.h"
#include "pooler/relay/relay.h"

namespace pgfleet::pool {

class ServerConn;

// The answer to a query pgfleet ran on a pool's server for a client that is logging in.
struct LookupAnswer {
  static LookupAnswer Failed(std::string error) {
    LookupAnswer answer;
    answer.error = std::move(error);
    return answer;
  }
  bool found = false;    // a row came back (auth_query: the user exists)
  std::string secret;    // auth_query: the row's password column ("" for NULL)
  std::string error;     // non-empty when the query failed: PostgreSQL's message, or pgfleet's
  std::string sqlstate;  // with PostgreSQL's error, its code
};

class LinkedClient : public net::Connection, public NotificationListener {
 public:
  LinkedClient(net::EventLoop& loop, int fd, uint64_t id, uint32_t max_packet_size,
               size_t tracked_params)
      : net::Connection(loop, fd), id_(id), stream_(max_packet_size, tracked_params) {}

  uint64_t id() const { return id_; }
  // The client's protocol state that the relay keeps across servers.
  ClientStream& stream() { return stream_; }
  const ClientSession& session() const { return stream_.session; }

  // Relays queued client bytes to the linked server; false when the client was closed.
  virtual bool RelayToServer() = 0;
  // Writes the queued notifications if the client may get them now.
  virtual void FlushNotifications() = 0;
  // Continues after the answer to its lookup.
  virtual void OnLookupAnswer(const LookupAnswer& answer) = 0;
  virtual void set_lookup_server(ServerConn* server) = 0;
  // Sends an ErrorResponse (FATAL or ERROR) and closes. Never throws away other clients.
  virtual void Fatal(std::string_view sqlstate, std::string_view message) = 0;
  // Closes without a message; logs `reason`.
  virtual void Close(std::string_view reason) = 0;

 protected:
  ~LinkedClient() override = default;

  const uint64_t id_;
  ClientStream stream_;
};

}  // namespace pgfleet::pool
