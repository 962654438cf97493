#include "pooler/sql/statement_classifier.h"

#include <pg_query.h>

#include <array>
#include <bit>
#include <cstdint>
#include <cstring>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "pg_query.pb.h"
#include "pooler/base/strings.h"

namespace pgfleet::sql {
namespace {

// The first words of the statements that can change a session or the schema (lower case).
constexpr std::array<std::string_view, 12> kSessionVerbs = {
    "set",   "reset",  "discard",  "prepare", "deallocate", "declare",
    "close", "listen", "unlisten", "create",  "drop",       "alter"};

// The first words of the statements that change the schema: whatever they create, alter or drop
// (a column, a type, a function, a view, a rule) may change how a prepared statement reads.
constexpr std::array<std::string_view, 3> kSchemaVerbs = {"create", "alter", "drop"};

// Skips white space, opening parentheses and comments (--, and /* */ as they nest).
size_t SkipBlanks(std::string_view sql, size_t pos) {
  while (pos < sql.size()) {
    const char c = sql[pos];
    if (absl::ascii_isspace(static_cast<unsigned char>(c)) || c == '(') {
      ++pos;
    } else if (c == '-' && pos + 1 < sql.size() && sql[pos + 1] == '-') {
      const size_t end = sql.find('\n', pos);
      pos = end == std::string_view::npos ? sql.size() : end + 1;
    } else if (c == '/' && pos + 1 < sql.size() && sql[pos + 1] == '*') {
      // PostgreSQL's block comments nest.
      int depth = 1;
      pos += 2;
      while (pos < sql.size() && depth > 0) {
        if (sql.compare(pos, 2, "/*") == 0) {
          ++depth;
          pos += 2;
        } else if (sql.compare(pos, 2, "*/") == 0) {
          --depth;
          pos += 2;
        } else {
          ++pos;
        }
      }
    } else {
      break;
    }
  }
  return pos;
}

// Whether `sql` holds `word` (lower-case ASCII letters and '_') at `at`, in any letter case.
// `c | 0x20` maps exactly the two cases of a letter onto its lower case, and no other byte.
bool HasWordAt(std::string_view sql, size_t at, std::string_view word) {
  if (at > sql.size() || sql.size() - at < word.size()) return false;
  for (size_t i = 0; i < word.size(); ++i) {
    const char c = sql[at + i];
    if ((word[i] == '_' ? c : static_cast<char>(c | 0x20)) != word[i]) return false;
  }
  return true;
}

// Whether an underscore at `at` belongs to "advisory_" (pg_advisory_lock and its kin) or
// "set_config": the only function calls that change a session.
bool NamesSessionFunction(std::string_view sql, size_t at) {
  return (at >= 8 && HasWordAt(sql, at - 8, "advisory")) ||
         (at >= 3 && HasWordAt(sql, at - 3, "set_config"));
}

// The high bit of each byte of `word` that equals the byte repeated in `pattern`, exactly: no
// borrow crosses from one byte into the next (Hacker's Delight, 6-1).
uint64_t BytesEqual(uint64_t word, uint64_t pattern) {
  constexpr uint64_t kLow7 = 0x7f7f7f7f7f7f7f7fULL;
  const uint64_t x = word ^ pattern;  // a zero byte where equal
  return ~(((x & kLow7) + kLow7) | x | kLow7);
}

// The bytes of `word` (first byte lowest) that may start what MayChangeSession looks for past
// the first word: ';', '_', 't' and 'T'. `| 0x20` folds 'T' onto 't' and lets two other bytes
// through (0x1b onto ';', 0x7f onto '_'), which CandidateMayChangeSession turns away.
uint64_t CandidateBytes(uint64_t word) {
  constexpr uint64_t kEach = 0x0101010101010101ULL;
  const uint64_t folded = word | (0x20 * kEach);
  return BytesEqual(folded, ';' * kEach) | BytesEqual(folded, ('_' | 0x20) * kEach) |
         BytesEqual(folded, 't' * kEach);
}

// Whether the byte at `at` starts a second statement, a session function's name or "temp".
bool CandidateMayChangeSession(std::string_view sql, size_t at) {
  switch (sql[at]) {
    case ';': {
      const size_t next = SkipBlanks(sql, at + 1);
      return next < sql.size() && sql[next] != ';';
    }
    case '_':
      return NamesSessionFunction(sql, at);
    case 't':
    case 'T':
      return HasWordAt(sql, at, "temp");
    default:
      return false;
  }
}

std::string Lower(std::string_view s) { return absl::AsciiStrToLower(base::Av(s)); }

// The last component of a qualified name (a List of String nodes).
std::string LastName(const google::protobuf::RepeatedPtrField<pg_query::Node>& names) {
  if (names.empty() || !names.rbegin()->has_string()) return "";
  return names.rbegin()->string().sval();
}

// A SQL string literal; the E'' form (backslashes doubled) when the value holds any.
std::string QuoteLiteral(std::string_view value) {
  const bool escape = value.find('\\') != std::string_view::npos;
  std::string out = escape ? "E'" : "'";
  for (char c : value) {
    if (c == '\'' || (escape && c == '\\')) out.push_back(c);
    out.push_back(c);
  }
  out.push_back('\'');
  return out;
}

// A constant's text, when the node is one (a string, number or boolean, cast or not).
bool ConstantText(const pg_query::Node& node, std::string* text) {
  if (node.has_type_cast()) return ConstantText(node.type_cast().arg(), text);
  if (!node.has_a_const()) return false;
  const auto& c = node.a_const();
  if (c.has_sval()) {
    *text = c.sval().sval();
  } else if (c.has_ival()) {
    *text = base::StrCat(c.ival().ival());
  } else if (c.has_fval()) {
    *text = c.fval().fval();
  } else if (c.has_boolval()) {
    *text = c.boolval().boolval() ? "true" : "false";
  } else {
    return false;
  }
  return true;
}

class Walker {
 public:
  explicit Walker(std::string_view sql) : sql_(sql) {}

  void Statement(const pg_query::RawStmt& raw) {
    const size_t begin = static_cast<size_t>(raw.stmt_location());
    const size_t len =
        raw.stmt_len() == 0 ? std::string_view::npos : static_cast<size_t>(raw.stmt_len());
    const std::string_view text = begin <= sql_.size() ? sql_.substr(begin, len) : sql_;
    const pg_query::Node& node = raw.stmt();
    if (ChangesSchema(node, text)) schema_.push_back(Effect{EffectKind::kSchemaChange, "", "", ""});
    switch (node.node_case()) {
      case pg_query::Node::kVariableSetStmt:
        VariableSet(node.variable_set_stmt(), text);
        break;
      case pg_query::Node::kDiscardStmt:
        switch (node.discard_stmt().target()) {
          case pg_query::DISCARD_ALL:
            Add(EffectKind::kDiscardAll);
            break;
          case pg_query::DISCARD_TEMP:
            Add(EffectKind::kDiscardTemp);
            break;
          default:
            break;
        }
        break;
      case pg_query::Node::kCreateStmt:
        CreateTemp(node.create_stmt().relation(),
                   node.create_stmt().oncommit() == pg_query::ONCOMMIT_DROP);
        break;
      case pg_query::Node::kCreateTableAsStmt:
        CreateTemp(node.create_table_as_stmt().into().rel(),
                   node.create_table_as_stmt().into().on_commit() == pg_query::ONCOMMIT_DROP);
        break;
      case pg_query::Node::kViewStmt:
        CreateTemp(node.view_stmt().view(), false);
        break;
      case pg_query::Node::kCreateSeqStmt:
        CreateTemp(node.create_seq_stmt().sequence(), false);
        break;
      case pg_query::Node::kSelectStmt:
        if (node.select_stmt().has_into_clause()) {
          CreateTemp(node.select_stmt().into_clause().rel(),
                     node.select_stmt().into_clause().on_commit() == pg_query::ONCOMMIT_DROP);
        }
        FunctionCalls(node, text);
        break;
      case pg_query::Node::kDropStmt: {
        const auto& drop = node.drop_stmt();
        const auto type = drop.remove_type();
        if (type != pg_query::OBJECT_TABLE && type != pg_query::OBJECT_VIEW &&
            type != pg_query::OBJECT_SEQUENCE) {
          break;
        }
        for (const auto& object : drop.objects()) {
          if (object.has_list()) Add(EffectKind::kDrop, LastName(object.list().items()));
        }
        break;
      }
      case pg_query::Node::kPrepareStmt:
        Add(EffectKind::kPrepare, node.prepare_stmt().name());
        break;
      case pg_query::Node::kDeallocateStmt:
        if (node.deallocate_stmt().name().empty()) {
          Add(EffectKind::kDeallocateAll);
        } else {
          Add(EffectKind::kDeallocate, node.deallocate_stmt().name());
        }
        break;
      case pg_query::Node::kDeclareCursorStmt: {
        constexpr int kCursorOptHold = 0x0020;  // CURSOR_OPT_HOLD in PostgreSQL's parsenodes.h
        if ((node.declare_cursor_stmt().options() & kCursorOptHold) != 0) {
          Add(EffectKind::kDeclareHold, node.declare_cursor_stmt().portalname());
        }
        break;
      }
      case pg_query::Node::kClosePortalStmt:
        if (node.close_portal_stmt().portalname().empty()) {
          Add(EffectKind::kCloseAll);
        } else {
          Add(EffectKind::kClose, node.close_portal_stmt().portalname());
        }
        break;
      case pg_query::Node::kListenStmt:
        Add(EffectKind::kListen, node.listen_stmt().conditionname());
        break;
      case pg_query::Node::kUnlistenStmt:
        if (node.unlisten_stmt().conditionname().empty()) {
          Add(EffectKind::kUnlistenAll);
        } else {
          Add(EffectKind::kUnlisten, node.unlisten_stmt().conditionname());
        }
        break;
      case pg_query::Node::kTransactionStmt:
      case pg_query::Node::kVariableShowStmt:
        break;
      default:
        // INSERT ... SELECT pg_advisory_lock(), CALL, VALUES: function calls anywhere.
        FunctionCalls(node, text);
        break;
    }
  }

  Effects Take() { return std::move(effects_); }
  Effects TakeSchemaChanges() { return std::move(schema_); }

  // Marks the effects of the statement just walked as the index-th statement's.
  void EndStatement(uint32_t index) {
    for (size_t i = marked_; i < effects_.size(); ++i) effects_[i].statement = index;
    marked_ = effects_.size();
    for (size_t i = schema_marked_; i < schema_.size(); ++i) schema_[i].statement = index;
    schema_marked_ = schema_.size();
  }

 private:
  static bool ChangesSchema(const pg_query::Node& node, std::string_view text) {
    // DISCARD ALL or TEMP drops temporary objects, but a statement over them fails alike whoever
    // prepared it, and whatever creates the next one (CREATE TEMP, SELECT INTO) counts: an
    // application that DISCARDs on every checkout does not start an epoch each time.
    if (node.node_case() == pg_query::Node::kSelectStmt)
      return node.select_stmt().has_into_clause();
    const size_t start = SkipBlanks(text, 0);
    for (std::string_view verb : kSchemaVerbs) {
      if (HasWordAt(text, start, verb) &&
          (start + verb.size() == text.size() ||
           !absl::ascii_isalnum(static_cast<unsigned char>(text[start + verb.size()])))) {
        return true;
      }
    }
    return false;
  }

  void Add(EffectKind kind, std::string name = "") {
    effects_.push_back(Effect{kind, std::move(name), "", ""});
  }

  void VariableSet(const pg_query::VariableSetStmt& set, std::string_view text) {
    if (set.is_local()) return;  // SET LOCAL lasts as long as its transaction
    const std::string name = Lower(set.name());
    switch (set.kind()) {
      case pg_query::VAR_SET_VALUE:
      case pg_query::VAR_SET_CURRENT: {
        Effect effect{EffectKind::kSet, name, std::string(text), ""};
        // SET ROLE and SET SESSION AUTHORIZATION have RESET forms of their own names.
        effect.reset_sql =
            base::StrCat("RESET ", name == "session_authorization" ? "SESSION AUTHORIZATION"
                                                                   : QuoteIdentifier(name));
        effects_.push_back(std::move(effect));
        break;
      }
      case pg_query::VAR_SET_MULTI:
        // SET TRANSACTION ... lasts one transaction; SET SESSION CHARACTERISTICS AS TRANSACTION
        // sets the three default_transaction_* settings.
        if (name == "session characteristics") {
          effects_.push_back(Effect{EffectKind::kSet, name, std::string(text),
                                    "RESET default_transaction_isolation; "
                                    "RESET default_transaction_read_only; "
                                    "RESET default_transaction_deferrable"});
        }
        break;
      case pg_query::VAR_SET_DEFAULT:
      case pg_query::VAR_RESET:
        Add(EffectKind::kReset, name);
        break;
      case pg_query::VAR_RESET_ALL:
        Add(EffectKind::kResetAll);
        break;
      default:
        break;
    }
  }

  void CreateTemp(const pg_query::RangeVar& rel, bool dropped_at_commit) {
    // ON COMMIT DROP: gone with its transaction, nothing outlives it.
    if (rel.relpersistence() == "t" && !dropped_at_commit)
      Add(EffectKind::kCreateTemp, rel.relname());
  }

  // Advisory lock functions and set_config() wherever they are called in the statement.
  void FunctionCalls(const pg_query::Node& node, std::string_view text) {
    bool named = false;
    for (size_t at = text.find('_'); at != std::string_view::npos; at = text.find('_', at + 1)) {
      if (NamesSessionFunction(text, at)) {
        named = true;
        break;
      }
    }
    if (named) Visit(node);
  }

  void Visit(const google::protobuf::Message& message) {
    if (const auto* call = dynamic_cast<const pg_query::FuncCall*>(&message)) OnCall(*call);
    const auto* reflection = message.GetReflection();
    std::vector<const google::protobuf::FieldDescriptor*> fields;
    reflection->ListFields(message, &fields);
    for (const auto* field : fields) {
      if (field->cpp_type() != google::protobuf::FieldDescriptor::CPPTYPE_MESSAGE) continue;
      if (field->is_repeated()) {
        const int n = reflection->FieldSize(message, field);
        for (int i = 0; i < n; ++i) Visit(reflection->GetRepeatedMessage(message, field, i));
      } else {
        Visit(reflection->GetMessage(message, field));
      }
    }
  }

  void OnCall(const pg_query::FuncCall& call) {
    const std::string name = Lower(LastName(call.funcname()));
    if (name == "pg_advisory_lock" || name == "pg_advisory_lock_shared") {
      Add(EffectKind::kAdvisoryLock);
    } else if (name == "pg_try_advisory_lock" || name == "pg_try_advisory_lock_shared") {
      Add(EffectKind::kTryAdvisoryLock);
    } else if (name == "pg_advisory_unlock" || name == "pg_advisory_unlock_shared") {
      Add(EffectKind::kAdvisoryUnlock);
    } else if (name == "pg_advisory_unlock_all") {
      Add(EffectKind::kAdvisoryUnlockAll);
    } else if (name == "set_config" && call.args_size() == 3) {
      std::string setting, value, is_local;
      if (!ConstantText(call.args(0), &setting) || !ConstantText(call.args(1), &value) ||
          !ConstantText(call.args(2), &is_local)) {
        return;  // computed: nothing pgfleet could replay
      }
      is_local = Lower(is_local);
      if (is_local == "true" || is_local == "t" || is_local == "on" || is_local == "1") return;
      effects_.push_back(SetConfigEffect(setting, value));
    }
  }

  std::string_view sql_;
  Effects effects_;
  size_t marked_ = 0;  // effects_[0, marked_) carry their statement index
  Effects schema_;     // at most one per statement
  size_t schema_marked_ = 0;
};

}  // namespace

bool MayChangeSession(std::string_view sql) {
  const size_t start = SkipBlanks(sql, 0);
  size_t end = start;
  while (end < sql.size() && end - start <= 10 &&
         absl::ascii_isalpha(static_cast<unsigned char>(sql[end]))) {
    ++end;
  }
  // Lower-cased once, then compared byte for byte: this runs on every Query and Parse.
  char lower[16];
  const size_t length = end - start;  // at most 11 letters
  for (size_t i = 0; i < length; ++i) {
    lower[i] = absl::ascii_tolower(static_cast<unsigned char>(sql[start + i]));
  }
  const std::string_view verb(lower, length);
  for (std::string_view v : kSessionVerbs) {
    if (verb == v) return true;
  }
  // One pass over the rest for the three things that can hide after an ordinary first word
  // (this runs on every Query and Parse, so no byte is looked at twice):
  // - several statements in one Query, "BEGIN; SET ...; COMMIT" (a ';' at the very end is one);
  // - the session functions, pg_advisory_lock() and set_config();
  // - SELECT ... INTO TEMP t (and anything else naming "temp": a false alarm costs one parse).
  // Eight bytes are tested at a time for the few that can start one of them, and only those
  // bytes are looked at closely: a byte-by-byte loop cost about 12 instructions per byte.
  for (size_t at = start; at < sql.size(); at += 8) {
    uint64_t word = 0;
    if (sql.size() - at >= 8) {
      std::memcpy(&word, sql.data() + at, 8);
    } else {
      std::memcpy(&word, sql.data() + at, sql.size() - at);  // zeros are no candidate
    }
    if constexpr (std::endian::native == std::endian::big) word = __builtin_bswap64(word);
    for (uint64_t marks = CandidateBytes(word); marks != 0; marks &= marks - 1) {
      if (CandidateMayChangeSession(sql, at + (std::countr_zero(marks) >> 3))) return true;
    }
  }
  return false;
}

Classification Classify(std::string_view sql) {
  Classification out;
  const std::string text(sql);  // libpg_query wants a C string
  PgQueryProtobufParseResult result = pg_query_parse_protobuf(text.c_str());
  if (result.error != nullptr) {
    out.parsed = false;
    pg_query_free_protobuf_parse_result(result);
    return out;
  }
  pg_query::ParseResult tree;
  const bool ok =
      tree.ParseFromArray(result.parse_tree.data, static_cast<int>(result.parse_tree.len));
  pg_query_free_protobuf_parse_result(result);
  if (!ok) {
    out.parsed = false;
    return out;
  }
  Walker walker(text);
  uint32_t index = 0;
  for (const auto& raw : tree.stmts()) {
    walker.Statement(raw);
    walker.EndStatement(index++);
  }
  out.effects = walker.Take();
  out.schema_changes = walker.TakeSchemaChanges();
  out.statements = tree.stmts_size();
  return out;
}

Effect SetConfigEffect(std::string_view name, std::string_view value) {
  const std::string setting = Lower(name);
  return Effect{EffectKind::kSet, setting,
                base::StrCat("SELECT pg_catalog.set_config(", QuoteLiteral(setting), ", ",
                             QuoteLiteral(value), ", false)"),
                base::StrCat("RESET ", QuoteIdentifier(setting))};
}

bool StartsWithListenVerb(std::string_view sql) {
  const size_t start = SkipBlanks(sql, 0);
  size_t end = start;
  while (end < sql.size() && end - start <= 8 &&
         absl::ascii_isalpha(static_cast<unsigned char>(sql[end]))) {
    ++end;
  }
  const size_t length = end - start;
  return (length == 6 && HasWordAt(sql, start, "listen")) ||
         (length == 8 && HasWordAt(sql, start, "unlisten"));
}

std::string QuoteIdentifier(std::string_view name) {
  std::string out = "\"";
  for (char c : name) {
    if (c == '"') out.push_back('"');
    out.push_back(c);
  }
  out.push_back('"');
  return out;
}

}  // namespace pgfleet::sql
