// A client as its server sees it: the end of the link that ServerConn writes answers to, wakes
// when its own output drains, and reports the end of an auth_query to. ClientConn implements it;
// the server never includes client_conn.h, so the two shells have one direction between them
// (the client drives its server: client_conn.cc includes server_conn.h).
#pragma once

#include <string>
#include <string_view>

#include "pooler/listen/listen_hub.h"
#include "pooler/net/connection.h"
#include "pooler/relay/relay.h"

namespace pgfleet::pool {

class ServerConn;

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
  // Continues after the auth_query answer: `found` false when no such user; `error` non-empty
  // when the query failed.
  virtual void OnAuthQueryResult(bool found, const std::string& secret, std::string_view error) = 0;
  virtual void set_auth_query_server(ServerConn* server) = 0;
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
