// Builders for every message pgfleet writes itself. Each appends one whole message to `sink`.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include "pooler/protocol/byte_sink.h"

namespace pgfleet::protocol {

// --- backend messages (pgfleet -> client) ---
void BuildAuthenticationOk(ByteSink& sink);
void BuildAuthenticationCleartextPassword(ByteSink& sink);
void BuildAuthenticationMd5(ByteSink& sink, std::span<const uint8_t, 4> salt);
void BuildAuthenticationSasl(ByteSink& sink, std::span<const std::string_view> mechanisms);
void BuildAuthenticationSaslContinue(ByteSink& sink, std::string_view data);
void BuildAuthenticationSaslFinal(ByteSink& sink, std::string_view data);
void BuildParameterStatus(ByteSink& sink, std::string_view name, std::string_view value);
void BuildBackendKeyData(ByteSink& sink, uint32_t pid, std::span<const uint8_t> secret);
void BuildReadyForQuery(ByteSink& sink, char status);
// severity is "ERROR", "FATAL" or "NOTICE"/"WARNING" (sent both as S and V fields).
void BuildErrorResponse(ByteSink& sink, std::string_view severity, std::string_view sqlstate,
                        std::string_view message, std::string_view detail = {},
                        std::string_view hint = {});
void BuildNoticeResponse(ByteSink& sink, std::string_view severity, std::string_view sqlstate,
                         std::string_view message);
// `version`: the whole protocol version spoken (3.2 is 196610), not only its minor.
void BuildNegotiateProtocolVersion(ByteSink& sink, uint32_t version,
                                   std::span<const std::string> unrecognized);
void BuildCommandComplete(ByteSink& sink, std::string_view tag);
void BuildEmptyQueryResponse(ByteSink& sink);
struct ColumnSpec {
  std::string_view name;
  uint32_t type_oid;  // 25 text, 20 int8, 23 int4, 701 float8, 16 bool, 1043 varchar
};
void BuildRowDescription(ByteSink& sink, std::span<const ColumnSpec> columns);
// A DataRow of text values; std::nullopt-like absent values are written as NULL (-1).
void BuildDataRow(ByteSink& sink, std::span<const std::string_view> values,
                  std::span<const bool> is_null = {});
void BuildParseComplete(ByteSink& sink);
void BuildBindComplete(ByteSink& sink);
void BuildCloseComplete(ByteSink& sink);
void BuildNoData(ByteSink& sink);
void BuildParameterDescription(ByteSink& sink, std::span<const uint32_t> type_oids);
// A message of `type` whose body a server sent: passed on whole, e.g. a login ErrorResponse that
// every waiting client gets.
void BuildMessage(ByteSink& sink, char type, std::span<const uint8_t> body);

// --- frontend messages (pgfleet -> server) ---
void BuildStartupMessage(ByteSink& sink, uint32_t version,
                         std::span<const std::pair<std::string_view, std::string_view>> params);
void BuildPasswordMessage(ByteSink& sink, std::string_view password);
void BuildSaslInitialResponse(ByteSink& sink, std::string_view mechanism, std::string_view data);
void BuildSaslResponse(ByteSink& sink, std::string_view data);
void BuildQuery(ByteSink& sink, std::string_view sql);
void BuildSync(ByteSink& sink);
void BuildCancelRequest(ByteSink& sink, uint32_t pid, std::span<const uint8_t> secret);
void BuildSslRequest(ByteSink& sink);
void BuildParse(ByteSink& sink, std::string_view name, std::string_view query,
                std::span<const uint32_t> param_types);
void BuildClose(ByteSink& sink, char kind, std::string_view name);
// A Parse of statement `name` whose body after the name is `tail` as the client sent it (query,
// NUL, parameter types): a renamed or re-sent prepared statement.
void BuildParseWithTail(ByteSink& sink, std::string_view name, std::span<const uint8_t> tail);
// The start of a Bind (header, portal and statement names) whose remaining `rest_size` body bytes
// (parameters and result formats) the caller relays unchanged right after it.
void BuildBindHead(ByteSink& sink, std::string_view portal, std::string_view statement,
                   size_t rest_size);
// A whole Bind with text parameters and text results.
void BuildBindText(ByteSink& sink, std::string_view portal, std::string_view statement,
                   std::span<const std::string_view> values);
void BuildDescribe(ByteSink& sink, char kind, std::string_view name);
void BuildExecute(ByteSink& sink, std::string_view portal, uint32_t max_rows);
// Ends COPY FROM STDIN with an error: the server fails the COPY with `reason`.
void BuildCopyFail(ByteSink& sink, std::string_view reason);

}  // namespace pgfleet::protocol
