// Tracked session parameters.
#include "pooler/relay/param_sync.h"

#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "pooler/base/strings.h"

namespace pgfleet::pool {

TrackedParamNames::TrackedParamNames(const std::vector<std::string>& extra)
    : names_{"client_encoding", "DateStyle", "TimeZone", "standard_conforming_strings",
             "application_name"} {
  for (const auto& name : extra) {
    if (Find(name) < 0) names_.push_back(name);
  }
}

int TrackedParamNames::Find(std::string_view name) const {
  for (size_t i = 0; i < names_.size(); ++i) {
    if (absl::EqualsIgnoreCase(names_[i], base::Av(name))) return static_cast<int>(i);
  }
  return -1;
}

namespace {

// PostgreSQL's names for its encodings (src/common/encnames.c, pg_encname_tbl), as
// clean_encoding_name leaves them (letters and digits only, lower case), and the canonical name
// pg_encoding_to_char reports.
struct EncodingAlias {
  std::string_view alias;
  std::string_view canonical;
};
constexpr EncodingAlias kEncodingAliases[] = {
    {"abc", "WIN1258"},
    {"alt", "WIN866"},
    {"big5", "BIG5"},
    {"euccn", "EUC_CN"},
    {"eucjis2004", "EUC_JIS_2004"},
    {"eucjp", "EUC_JP"},
    {"euckr", "EUC_KR"},
    {"euctw", "EUC_TW"},
    {"gb18030", "GB18030"},
    {"gbk", "GBK"},
    {"iso88591", "LATIN1"},
    {"iso885910", "LATIN6"},
    {"iso885913", "LATIN7"},
    {"iso885914", "LATIN8"},
    {"iso885915", "LATIN9"},
    {"iso885916", "LATIN10"},
    {"iso88592", "LATIN2"},
    {"iso88593", "LATIN3"},
    {"iso88594", "LATIN4"},
    {"iso88595", "ISO_8859_5"},
    {"iso88596", "ISO_8859_6"},
    {"iso88597", "ISO_8859_7"},
    {"iso88598", "ISO_8859_8"},
    {"iso88599", "LATIN5"},
    {"johab", "JOHAB"},
    {"koi8", "KOI8R"},
    {"koi8r", "KOI8R"},
    {"koi8u", "KOI8U"},
    {"latin1", "LATIN1"},
    {"latin10", "LATIN10"},
    {"latin2", "LATIN2"},
    {"latin3", "LATIN3"},
    {"latin4", "LATIN4"},
    {"latin5", "LATIN5"},
    {"latin6", "LATIN6"},
    {"latin7", "LATIN7"},
    {"latin8", "LATIN8"},
    {"latin9", "LATIN9"},
    {"mskanji", "SJIS"},
    {"muleinternal", "MULE_INTERNAL"},
    {"shiftjis", "SJIS"},
    {"shiftjis2004", "SHIFT_JIS_2004"},
    {"sjis", "SJIS"},
    {"sqlascii", "SQL_ASCII"},
    {"tcvn", "WIN1258"},
    {"tcvn5712", "WIN1258"},
    {"uhc", "UHC"},
    {"unicode", "UTF8"},
    {"utf8", "UTF8"},
    {"vscii", "WIN1258"},
    {"win", "WIN1251"},
    {"win1250", "WIN1250"},
    {"win1251", "WIN1251"},
    {"win1252", "WIN1252"},
    {"win1253", "WIN1253"},
    {"win1254", "WIN1254"},
    {"win1255", "WIN1255"},
    {"win1256", "WIN1256"},
    {"win1257", "WIN1257"},
    {"win1258", "WIN1258"},
    {"win866", "WIN866"},
    {"win874", "WIN874"},
    {"win932", "SJIS"},
    {"win936", "GBK"},
    {"win949", "UHC"},
    {"win950", "BIG5"},
    {"windows1250", "WIN1250"},
    {"windows1251", "WIN1251"},
    {"windows1252", "WIN1252"},
    {"windows1253", "WIN1253"},
    {"windows1254", "WIN1254"},
    {"windows1255", "WIN1255"},
    {"windows1256", "WIN1256"},
    {"windows1257", "WIN1257"},
    {"windows1258", "WIN1258"},
    {"windows866", "WIN866"},
    {"windows874", "WIN874"},
    {"windows932", "SJIS"},
    {"windows936", "GBK"},
    {"windows949", "UHC"},
    {"windows950", "BIG5"},
};

}  // namespace

std::string CanonicalParamValue(std::string_view name, std::string_view value) {
  if (!absl::EqualsIgnoreCase(base::Av(name), "client_encoding")) return std::string(value);
  std::string clean;
  for (char c : value) {
    if (absl::ascii_isalnum(static_cast<unsigned char>(c))) {
      clean.push_back(absl::ascii_tolower(static_cast<unsigned char>(c)));
    }
  }
  for (const EncodingAlias& entry : kEncodingAliases) {
    if (entry.alias == clean) return std::string(entry.canonical);
  }
  return std::string(value);  // unknown: the server refuses it, in its words
}

size_t ParamSet::Offset(size_t slot) const {
  size_t offset = 0;
  for (size_t i = 0; i < slot; ++i) offset += EntrySize(offset);
  return offset;
}

uint32_t ParamSet::LengthAt(size_t offset) const {
  uint32_t length = 0;
  std::memcpy(&length, packed_.data() + offset, sizeof(length));
  return length;
}

std::optional<std::string_view> ParamSet::ValueAt(size_t offset) const {
  const uint32_t length = LengthAt(offset);
  if (length == kUnset) return std::nullopt;
  return std::string_view(packed_).substr(offset + sizeof(length), length);
}

size_t ParamSet::EntrySize(size_t offset) const {
  const uint32_t length = LengthAt(offset);
  return sizeof(length) + (length == kUnset ? 0 : length);
}

std::string ParamSet::Entry(uint32_t length, std::string_view value) {
  // A copy first, so that a value read from this set (Get) stays valid while it is written.
  std::string entry(sizeof(length), '\0');
  std::memcpy(entry.data(), &length, sizeof(length));
  entry.append(value);
  return entry;
}

void ParamSet::Resize(size_t slots) {
  if (slots < slots_) {
    packed_.resize(Offset(slots));
  } else {
    for (size_t i = slots_; i < slots; ++i) packed_.append(Entry(kUnset, ""));
  }
  slots_ = slots;
}

void ParamSet::Set(size_t slot, std::string_view value) {
  // A value is part of a protocol message, so it is far below 4 GiB (max_packet_size).
  const size_t offset = Offset(slot);
  packed_.replace(offset, EntrySize(offset), Entry(static_cast<uint32_t>(value.size()), value));
}

void ParamSet::Clear(size_t slot) {
  const size_t offset = Offset(slot);
  packed_.replace(offset, EntrySize(offset), Entry(kUnset, ""));
}

void ParamSet::FillUnset(const ParamSet& defaults) {
  for (size_t i = 0; i < slots_ && i < defaults.size(); ++i) {
    if (!IsSet(i) && defaults.IsSet(i)) Set(i, defaults.Get(i));
  }
}

absl::InlinedVector<std::optional<std::string_view>, 16> ParamSet::Values() const {
  absl::InlinedVector<std::optional<std::string_view>, 16> values;
  values.reserve(slots_);
  for (size_t offset = 0; offset < packed_.size(); offset += EntrySize(offset)) {
    values.push_back(ValueAt(offset));
  }
  return values;
}

std::string QuoteLiteral(std::string_view value) {
  std::string out;
  bool backslash = value.find('\\') != std::string_view::npos;
  out.append(backslash ? "E'" : "'");
  for (char c : value) {
    if (c == '\'') out.push_back('\'');
    if (c == '\\') out.push_back('\\');
    out.push_back(c);
  }
  out.push_back('\'');
  return out;
}

bool BuildParamSync(const TrackedParamNames& names, const ParamSet& wanted, const ParamSet& current,
                    std::string* sql) {
  if (wanted == current) return false;  // on almost every link: one comparison
  const auto want = wanted.Values();
  const auto have = current.Values();
  bool any = false;
  for (size_t i = 0; i < want.size(); ++i) {
    if (!want[i].has_value()) continue;
    if (i < have.size() && have[i] == want[i]) continue;
    // set_config() takes the value as the server reported it, list syntax and all: SET would
    // read a quoted list ('"$user", public') as one element, a schema of that name.
    base::StrAppend(sql, any ? "," : "SELECT ", "pg_catalog.set_config(",
                    QuoteLiteral(names.name(i)), ",", QuoteLiteral(*want[i]), ",false)");
    any = true;
  }
  if (any) sql->push_back(';');
  return any;
}

}  // namespace pgfleet::pool
