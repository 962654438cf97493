// Message builders. Messages are assembled in a small local buffer and appended whole, so a
// sink never sees half a message.
#include "pooler/protocol/builders.h"

#include <string>

#include "pooler/base/strings.h"
#include "pooler/protocol/frame.h"
#include "pooler/protocol/reader.h"

namespace pgfleet::protocol {
namespace {

// Collects one message body, then writes type + length + body to the sink.
class Message {
 public:
  explicit Message(char type) {
    if (type != 0) bytes_.push_back(type);
    header_ = bytes_.size();
    bytes_.append(4, '\0');
  }
  Message& Byte(char b) {
    bytes_.push_back(b);
    return *this;
  }
  Message& Int16(int16_t v) {
    bytes_.push_back(static_cast<char>((v >> 8) & 0xff));
    bytes_.push_back(static_cast<char>(v & 0xff));
    return *this;
  }
  Message& Int32(uint32_t v) {
    uint8_t b[4];
    StoreBigEndian32(b, v);
    bytes_.append(reinterpret_cast<char*>(b), 4);
    return *this;
  }
  Message& CString(std::string_view s) {
    bytes_.append(s);
    bytes_.push_back('\0');
    return *this;
  }
  Message& Raw(std::string_view s) {
    bytes_.append(s);
    return *this;
  }
  Message& Raw(std::span<const uint8_t> s) {
    bytes_.append(base::AsText(s));
    return *this;
  }
  void Finish(ByteSink& sink) { FinishBefore(sink, 0); }
  // Writes the message's first part; its length counts `trailing` more body bytes that the
  // caller relays after it (the parameters of a renamed Bind).
  void FinishBefore(ByteSink& sink, size_t trailing) {
    StoreBigEndian32(reinterpret_cast<uint8_t*>(bytes_.data() + header_),
                     static_cast<uint32_t>(bytes_.size() - header_ + trailing));
    sink.Append(bytes_);
  }

 private:
  std::string bytes_;
  size_t header_ = 0;
};

void BuildErrorOrNotice(ByteSink& sink, char type, std::string_view severity,
                        std::string_view sqlstate, std::string_view message,
                        std::string_view detail, std::string_view hint) {
  Message m(type);
  m.Byte('S').CString(severity).Byte('V').CString(severity);
  m.Byte('C').CString(sqlstate).Byte('M').CString(message);
  if (!detail.empty()) m.Byte('D').CString(detail);
  if (!hint.empty()) m.Byte('H').CString(hint);
  m.Byte('\0').Finish(sink);
}

}  // namespace

void BuildAuthenticationOk(ByteSink& sink) { Message('R').Int32(0).Finish(sink); }
void BuildAuthenticationCleartextPassword(ByteSink& sink) { Message('R').Int32(3).Finish(sink); }
void BuildAuthenticationMd5(ByteSink& sink, std::span<const uint8_t, 4> salt) {
  Message('R').Int32(5).Raw(std::span<const uint8_t>(salt)).Finish(sink);
}
void BuildAuthenticationSasl(ByteSink& sink, std::span<const std::string_view> mechanisms) {
  Message m('R');
  m.Int32(10);
  for (auto mech : mechanisms) m.CString(mech);
  m.Byte('\0').Finish(sink);
}
void BuildAuthenticationSaslContinue(ByteSink& sink, std::string_view data) {
  Message('R').Int32(11).Raw(data).Finish(sink);
}
void BuildAuthenticationSaslFinal(ByteSink& sink, std::string_view data) {
  Message('R').Int32(12).Raw(data).Finish(sink);
}
void BuildParameterStatus(ByteSink& sink, std::string_view name, std::string_view value) {
  Message('S').CString(name).CString(value).Finish(sink);
}
void BuildBackendKeyData(ByteSink& sink, uint32_t pid, std::span<const uint8_t> secret) {
  Message('K').Int32(pid).Raw(secret).Finish(sink);
}
void BuildReadyForQuery(ByteSink& sink, char status) { Message('Z').Byte(status).Finish(sink); }
void BuildErrorResponse(ByteSink& sink, std::string_view severity, std::string_view sqlstate,
                        std::string_view message, std::string_view detail, std::string_view hint) {
  BuildErrorOrNotice(sink, 'E', severity, sqlstate, message, detail, hint);
}
void BuildNoticeResponse(ByteSink& sink, std::string_view severity, std::string_view sqlstate,
                         std::string_view message) {
  BuildErrorOrNotice(sink, 'N', severity, sqlstate, message, {}, {});
}
void BuildNegotiateProtocolVersion(ByteSink& sink, uint32_t version,
                                   std::span<const std::string> unrecognized) {
  Message m('v');
  m.Int32(version).Int32(static_cast<uint32_t>(unrecognized.size()));
  for (const auto& name : unrecognized) m.CString(name);
  m.Finish(sink);
}
void BuildCommandComplete(ByteSink& sink, std::string_view tag) {
  Message('C').CString(tag).Finish(sink);
}
void BuildEmptyQueryResponse(ByteSink& sink) { Message('I').Finish(sink); }
void BuildRowDescription(ByteSink& sink, std::span<const ColumnSpec> columns) {
  Message m('T');
  m.Int16(static_cast<int16_t>(columns.size()));
  for (const auto& col : columns) {
    m.CString(col.name).Int32(0).Int16(0).Int32(col.type_oid).Int16(-1).Int32(0xffffffff);
    m.Int16(0);
  }
  m.Finish(sink);
}
void BuildDataRow(ByteSink& sink, std::span<const std::string_view> values,
                  std::span<const bool> is_null) {
  Message m('D');
  m.Int16(static_cast<int16_t>(values.size()));
  for (size_t i = 0; i < values.size(); ++i) {
    if (i < is_null.size() && is_null[i]) {
      m.Int32(0xffffffff);
    } else {
      m.Int32(static_cast<uint32_t>(values[i].size())).Raw(values[i]);
    }
  }
  m.Finish(sink);
}
void BuildParseComplete(ByteSink& sink) { Message('1').Finish(sink); }
void BuildBindComplete(ByteSink& sink) { Message('2').Finish(sink); }
void BuildCloseComplete(ByteSink& sink) { Message('3').Finish(sink); }
void BuildNoData(ByteSink& sink) { Message('n').Finish(sink); }
void BuildParameterDescription(ByteSink& sink, std::span<const uint32_t> type_oids) {
  Message message('t');
  message.Int16(static_cast<int16_t>(type_oids.size()));
  for (uint32_t oid : type_oids) message.Int32(oid);
  message.Finish(sink);
}
void BuildMessage(ByteSink& sink, char type, std::span<const uint8_t> body) {
  Message(type).Raw(body).Finish(sink);
}

void BuildStartupMessage(ByteSink& sink, uint32_t version,
                         std::span<const std::pair<std::string_view, std::string_view>> params) {
  Message m(0);
  m.Int32(version);
  for (const auto& [name, value] : params) m.CString(name).CString(value);
  m.Byte('\0').Finish(sink);
}
void BuildPasswordMessage(ByteSink& sink, std::string_view password) {
  Message('p').CString(password).Finish(sink);
}
void BuildSaslInitialResponse(ByteSink& sink, std::string_view mechanism, std::string_view data) {
  Message('p').CString(mechanism).Int32(static_cast<uint32_t>(data.size())).Raw(data).Finish(sink);
}
void BuildSaslResponse(ByteSink& sink, std::string_view data) {
  Message('p').Raw(data).Finish(sink);
}
void BuildQuery(ByteSink& sink, std::string_view sql) { Message('Q').CString(sql).Finish(sink); }
void BuildSync(ByteSink& sink) { Message('S').Finish(sink); }
void BuildCancelRequest(ByteSink& sink, uint32_t pid, std::span<const uint8_t> secret) {
  Message(0).Int32(80877102).Int32(pid).Raw(secret).Finish(sink);
}
void BuildSslRequest(ByteSink& sink) { Message(0).Int32(kSslRequestCode).Finish(sink); }
void BuildParse(ByteSink& sink, std::string_view name, std::string_view query,
                std::span<const uint32_t> param_types) {
  Message m('P');
  m.CString(name).CString(query).Int16(static_cast<int16_t>(param_types.size()));
  for (uint32_t oid : param_types) m.Int32(oid);
  m.Finish(sink);
}
void BuildClose(ByteSink& sink, char kind, std::string_view name) {
  Message('C').Byte(kind).CString(name).Finish(sink);
}

void BuildParseWithTail(ByteSink& sink, std::string_view name, std::span<const uint8_t> tail) {
  Message('P').CString(name).Raw(tail).Finish(sink);
}
void BuildBindHead(ByteSink& sink, std::string_view portal, std::string_view statement,
                   size_t rest_size) {
  Message('B').CString(portal).CString(statement).FinishBefore(sink, rest_size);
}
void BuildBindText(ByteSink& sink, std::string_view portal, std::string_view statement,
                   std::span<const std::string_view> values) {
  Message message('B');
  message.CString(portal).CString(statement).Int16(0);  // no format codes: all text
  message.Int16(static_cast<int16_t>(values.size()));
  for (std::string_view value : values) {
    message.Int32(static_cast<uint32_t>(value.size())).Raw(value);
  }
  message.Int16(0).Finish(sink);  // result columns in text
}
void BuildDescribe(ByteSink& sink, char kind, std::string_view name) {
  Message('D').Byte(kind).CString(name).Finish(sink);
}
void BuildExecute(ByteSink& sink, std::string_view portal, uint32_t max_rows) {
  Message('E').CString(portal).Int32(max_rows).Finish(sink);
}
void BuildCopyFail(ByteSink& sink, std::string_view reason) {
  Message('f').CString(reason).Finish(sink);
}

}  // namespace pgfleet::protocol
