#include "pooler/relay/idle_answer.h"

#include <string_view>

#include "pooler/base/strings.h"
#include "pooler/protocol/frame.h"
#include "pooler/sql/statement_classifier.h"

namespace pgfleet::pool {

bool MayAnswerIdle(std::span<const uint8_t> data) {
  constexpr size_t kBody = protocol::kHeaderSize;
  if (data.empty()) return true;
  std::string_view text;
  switch (data[0]) {
    case 'Q':
      if (data.size() <= kBody) return true;
      text = base::AsText(data.subspan(kBody));
      break;
    case 'P':
      if (data.size() <= kBody + 1) return true;
      if (data[kBody] != '\0') return false;         // a named statement
      text = base::AsText(data.subspan(kBody + 1));  // after the unnamed one's empty name
      break;
    default:
      return false;
  }
  return !sql::StartsWithOtherLetter(text, "dlu");
}

}  // namespace pgfleet::pool
