// SQLSTATE codes pgfleet sends itself (PostgreSQL's errcodes.txt).
#pragma once

#include <string_view>

namespace pgfleet::protocol::sqlstate {

inline constexpr std::string_view kSuccessfulCompletion = "00000";  // a NOTICE of pgfleet's own
inline constexpr std::string_view kProtocolViolation = "08P01";
inline constexpr std::string_view kConnectionFailure = "08006";
inline constexpr std::string_view kInvalidPassword = "28P01";
inline constexpr std::string_view kInvalidAuthorization = "28000";
inline constexpr std::string_view kInvalidCatalogName = "3D000";
// A write in a read-only transaction: on a standby, or where default_transaction_read_only is on.
inline constexpr std::string_view kReadOnlySqlTransaction = "25006";
inline constexpr std::string_view kTooManyConnections = "53300";
inline constexpr std::string_view kConfigurationLimitExceeded = "53400";
inline constexpr std::string_view kQueryCanceled = "57014";
inline constexpr std::string_view kAdminShutdown = "57P01";
inline constexpr std::string_view kIdleSessionTimeout = "57P05";
inline constexpr std::string_view kIdleInTransactionTimeout = "25P03";
inline constexpr std::string_view kTransactionTimeout = "25P04";  // PostgreSQL 17's
inline constexpr std::string_view kFeatureNotSupported = "0A000";
inline constexpr std::string_view kObjectNotInPrerequisiteState = "55000";
inline constexpr std::string_view kInvalidSqlStatementName = "26000";
inline constexpr std::string_view kDuplicatePreparedStatement = "42P05";

}  // namespace pgfleet::protocol::sqlstate
