// A table answered over the simple query protocol: RowDescription, one DataRow per row and
// CommandComplete. Values are sent as text; numeric columns are typed int8 or float8 so clients
// that look at the type (psql alignment, drivers) treat them as numbers, as PgBouncer does, and an
// empty value there is NULL.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "pooler/protocol/byte_sink.h"

namespace pgfleet::admin {

class ResultSet {
 public:
  enum class Type { kText, kInt, kFloat };

  ResultSet& AddColumn(std::string name, Type type = Type::kText);
  // Appends a row with one value per column, in column order.
  void AddRow(std::vector<std::string> values);

  size_t column_count() const { return columns_.size(); }
  const std::vector<std::vector<std::string>>& rows() const { return rows_; }

  // Writes the whole answer with CommandComplete `tag` (not ReadyForQuery).
  void Write(protocol::ByteSink& sink, std::string_view tag) const;

 private:
  struct Column {
    std::string name;
    Type type;
  };
  std::vector<Column> columns_;
  std::vector<std::vector<std::string>> rows_;
};

}  // namespace pgfleet::admin
