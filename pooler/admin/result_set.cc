// Admin console result sets.
#include "pooler/admin/result_set.h"

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
  for (const auto& row : rows_) {
    values.assign(row.begin(), row.end());
    protocol::BuildDataRow(sink, values);
  }
  protocol::BuildCommandComplete(sink, tag);
}

}  // namespace pgfleet::admin
