// Admin console result sets.
#include "pooler/admin/result_set.h"

#include <memory>
#include <span>

#include "pooler/protocol/builders.h"

namespace pgfleet::admin {
namespace {

constexpr uint32_t kTextOid = 25;
constexpr uint32_t kInt8Oid = 20;
constexpr uint32_t kFloat8Oid = 701;

}  // namespace

ResultSet& ResultSet::AddColumn(std::string name, Type type) {
  columns_.push_back({std::move(name), type});
  return *this;
}

void ResultSet::AddRow(std::vector<std::string> values) {
  values.resize(columns_.size());
  rows_.push_back(std::move(values));
}

void ResultSet::Write(protocol::ByteSink& sink, std::string_view tag) const {
  std::vector<protocol::ColumnSpec> specs;
  specs.reserve(columns_.size());
  for (const auto& c : columns_) {
    specs.push_back({c.name, c.type == Type::kInt     ? kInt8Oid
                             : c.type == Type::kFloat ? kFloat8Oid
                                                      : kTextOid});
  }
  protocol::BuildRowDescription(sink, specs);
  std::vector<std::string_view> values;
  // An empty value in a numeric column is NULL (a user's pool_size that is not set), as
  // PgBouncer sends it: "" would not parse as a number.
  const auto is_null = std::make_unique<bool[]>(columns_.size());  // not vector<bool>: a span
  for (const auto& row : rows_) {
    values.assign(row.begin(), row.end());
    for (size_t i = 0; i < columns_.size(); ++i) {
      is_null[i] = columns_[i].type != Type::kText && row[i].empty();
    }
    protocol::BuildDataRow(sink, values, std::span<const bool>(is_null.get(), columns_.size()));
  }
  protocol::BuildCommandComplete(sink, tag);
}

}  // namespace pgfleet::admin
