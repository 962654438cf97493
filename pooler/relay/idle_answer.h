// The one look at an idle client's next messages that tells whether pgfleet may answer them
// itself (an idle DEALLOCATE, LISTEN or UNLISTEN: Relay::AnswerIdleDeallocate, ReadIdleListen)
// before they go to a server.
#pragma once

#include <cstdint>
#include <span>

namespace pgfleet::pool {

// False when `data`, an idle client's bytes at a message boundary, certainly holds none of the
// statements pgfleet answers idle. Those come as a Query or as the unnamed statement's Parse, and
// their text starts with D, L or U (or a blank or comment first); any other first message, a
// named Parse, or a text that starts with another letter is passed on with this one look instead
// of being framed and read by each answer. True (ask them) when there are too few bytes to tell.
// The answers do not repeat this look: their callers ask it first (ClientConn, idle and inside
// a quiet transaction).
bool MayAnswerIdle(std::span<const uint8_t> data);

}  // namespace pgfleet::pool
