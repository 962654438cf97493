// Tests for pooler/relay/param_sync.h: tracked names, per-slot values and the SET that syncs them.
#include "pooler/relay/param_sync.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "pooler/base/strings.h"

namespace pgfleet::pool {
namespace {

TEST(TrackedParamNamesTest, AlwaysTracksTheReportedDefaults) {
  TrackedParamNames names({});
  ASSERT_EQ(names.size(), 5u);
  EXPECT_EQ(names.name(0), "client_encoding");
  EXPECT_EQ(names.name(1), "DateStyle");
  EXPECT_EQ(names.name(2), "TimeZone");
  EXPECT_EQ(names.name(3), "standard_conforming_strings");
  EXPECT_EQ(names.name(4), "application_name");
}

TEST(TrackedParamNamesTest, FindIsCaseInsensitive) {
  TrackedParamNames names({});
  EXPECT_EQ(names.Find("client_encoding"), 0);
  EXPECT_EQ(names.Find("CLIENT_ENCODING"), 0);
  EXPECT_EQ(names.Find("datestyle"), 1);
  EXPECT_EQ(names.Find("timezone"), 2);
  EXPECT_EQ(names.Find("Application_Name"), 4);
  EXPECT_EQ(names.Find("search_path"), -1);
  EXPECT_EQ(names.Find(""), -1);
  EXPECT_EQ(names.Find("TimeZon"), -1);
  EXPECT_EQ(names.Find("TimeZoneX"), -1);
}

TEST(TrackedParamNamesTest, ExtrasAreAppendedOnceInOrder) {
  TrackedParamNames names({"IntervalStyle", "search_path", "DATESTYLE", "intervalstyle"});
  ASSERT_EQ(names.size(), 7u);
  EXPECT_EQ(names.name(5), "IntervalStyle");
  EXPECT_EQ(names.name(6), "search_path");
  EXPECT_EQ(names.Find("INTERVALSTYLE"), 5);
  EXPECT_EQ(names.Find("Search_Path"), 6);
  // A built-in repeated in extras keeps its slot and canonical spelling.
  EXPECT_EQ(names.Find("DateStyle"), 1);
  EXPECT_EQ(names.name(1), "DateStyle");
}

TEST(ParamSetTest, SetGetAndFillUnset) {
  ParamSet client(3);
  EXPECT_FALSE(client.IsSet(0));
  client.Set(0, "UTF8");
  client.Set(2, "");  // set to empty is still set
  EXPECT_TRUE(client.IsSet(0));
  EXPECT_TRUE(client.IsSet(2));
  EXPECT_EQ(client.Get(0), "UTF8");

  ParamSet defaults(3);
  defaults.Set(0, "LATIN1");
  defaults.Set(1, "ISO, MDY");
  defaults.Set(2, "x");
  client.FillUnset(defaults);
  EXPECT_EQ(client.Get(0), "UTF8");
  EXPECT_EQ(client.Get(1), "ISO, MDY");
  EXPECT_EQ(client.Get(2), "");
}

TEST(ParamSetTest, FillUnsetToleratesSizeMismatchAndResizeKeepsValues) {
  ParamSet small(1);
  small.Set(0, "a");
  small.Resize(3);
  EXPECT_TRUE(small.IsSet(0));
  EXPECT_EQ(small.Get(0), "a");
  EXPECT_FALSE(small.IsSet(2));
  ParamSet defaults(2);
  defaults.Set(1, "b");
  small.FillUnset(defaults);
  EXPECT_EQ(small.Get(1), "b");
  EXPECT_FALSE(small.IsSet(2));
}

TEST(ParamSetTest, EqualOnlyWithTheSameValuesInTheSameSlots) {
  ParamSet a(3);
  ParamSet b(3);
  EXPECT_EQ(a, b);
  a.Set(1, "");  // set to empty differs from never set
  EXPECT_NE(a, b);
  b.Set(1, "");
  EXPECT_EQ(a, b);
  a.Set(0, "x");
  b.Set(0, "xy");
  EXPECT_NE(a, b);
  b.Set(0, "x");
  EXPECT_EQ(a, b);
  // The same bytes split differently over the slots are different values.
  a.Set(2, "ab");
  b.Set(1, "a");
  b.Set(2, "b");
  EXPECT_NE(a, b);
  EXPECT_NE(a, ParamSet(2));
}

TEST(ParamSetTest, ClearUnsetsOneSlot) {
  ParamSet set(3);
  set.Set(0, "a");
  set.Set(1, "bb");
  set.Set(2, "c");
  set.Clear(1);
  EXPECT_FALSE(set.IsSet(1));
  EXPECT_EQ(set.Get(0), "a");
  EXPECT_EQ(set.Get(2), "c");
  ParamSet expected(3);
  expected.Set(0, "a");
  expected.Set(2, "c");
  EXPECT_EQ(set, expected);
}

TEST(ParamSetTest, AValueReadFromTheSameSetCanBeWritten) {
  ParamSet set(2);
  const std::string long_value(100, 'v');  // past the string's inline storage: it reallocates
  set.Set(0, long_value);
  set.Set(1, set.Get(0));
  EXPECT_EQ(set.Get(1), long_value);
  set.Set(0, set.Get(1).substr(0, 3));
  EXPECT_EQ(set.Get(0), "vvv");
  EXPECT_EQ(set.Get(1), long_value);
}

TEST(ParamSetTest, ReplacingAValueKeepsItsNeighbours) {
  ParamSet set(3);
  set.Set(0, "first");
  set.Set(2, "last");
  set.Set(1, "a value longer than the others");
  set.Set(1, "");
  set.Set(1, "mid");
  EXPECT_EQ(set.Get(0), "first");
  EXPECT_EQ(set.Get(1), "mid");
  EXPECT_EQ(set.Get(2), "last");
  set.Resize(2);
  EXPECT_EQ(set.size(), 2u);
  EXPECT_EQ(set.Get(1), "mid");
  set.Resize(3);
  EXPECT_FALSE(set.IsSet(2));
}

class BuildParamSyncTest : public ::testing::Test {
 protected:
  TrackedParamNames names_{{"search_path"}};
  ParamSet wanted_{names_.size()};
  ParamSet current_{names_.size()};
};

TEST_F(BuildParamSyncTest, EmitsOnlyDifferingSetValues) {
  wanted_.Set(0, "UTF8");
  current_.Set(0, "UTF8");
  wanted_.Set(2, "UTC");
  current_.Set(2, "Europe/Berlin");
  std::string sql;
  EXPECT_TRUE(BuildParamSync(names_, wanted_, current_, &sql));
  EXPECT_EQ(sql, "SELECT pg_catalog.set_config('TimeZone','UTC',false);");
}

TEST_F(BuildParamSyncTest, NothingToDoLeavesSqlUntouched) {
  wanted_.Set(4, "app");
  current_.Set(4, "app");
  current_.Set(2, "UTC");  // set on the server only: the client did not ask, so leave it
  std::string sql = "prefix";
  EXPECT_FALSE(BuildParamSync(names_, wanted_, current_, &sql));
  EXPECT_EQ(sql, "prefix");
}

TEST_F(BuildParamSyncTest, UnsetOnServerIsSentAndAppendedInSlotOrder) {
  wanted_.Set(5, "app, public");
  wanted_.Set(1, "ISO, DMY");
  wanted_.Set(4, "");  // an empty application_name differs from a non-empty one
  current_.Set(4, "psql");
  std::string sql = "BEGIN;";
  EXPECT_TRUE(BuildParamSync(names_, wanted_, current_, &sql));
  EXPECT_EQ(sql,
            "BEGIN;SELECT pg_catalog.set_config('DateStyle','ISO, DMY',false),"
            "pg_catalog.set_config('application_name','',false),"
            "pg_catalog.set_config('search_path','app, public',false);");
}

TEST_F(BuildParamSyncTest, ValuesAreCompareCaseSensitivelyAndQuoted) {
  wanted_.Set(4, "it's");
  current_.Set(4, "IT'S");
  std::string sql;
  EXPECT_TRUE(BuildParamSync(names_, wanted_, current_, &sql));
  EXPECT_EQ(sql, "SELECT pg_catalog.set_config('application_name','it''s',false);");
}

// The one-comparison shortcut and the slot-by-slot pass agree with the plain rule (every slot
// set in `wanted` whose value `current` does not hold is sent, in slot order) on random sets.
TEST_F(BuildParamSyncTest, AgreesWithTheSlotBySlotRuleOnRandomSets) {
  constexpr std::string_view kValues[] = {"", "a", "ab", "b"};
  uint64_t state = 0x2545f4914f6cdd1du;
  const auto next = [&state](uint64_t bound) {
    state = state * 6364136223846793005u + 1442695040888963407u;
    return (state >> 33) % bound;
  };
  int equal_sets = 0;
  for (int round = 0; round < 5000; ++round) {
    ParamSet wanted(names_.size());
    ParamSet current(names_.size());
    for (ParamSet* set : {&wanted, &current}) {
      for (size_t slot = 0; slot < names_.size(); ++slot) {
        if (const uint64_t pick = next(6); pick < 4) set->Set(slot, kValues[pick]);
      }
    }
    if (next(2) == 0) current = wanted;
    equal_sets += wanted == current;
    std::string expected;
    for (size_t slot = 0; slot < names_.size(); ++slot) {
      if (!wanted.IsSet(slot)) continue;
      if (current.IsSet(slot) && current.Get(slot) == wanted.Get(slot)) continue;
      base::StrAppend(&expected, expected.empty() ? "SELECT " : ",", "pg_catalog.set_config(",
                      QuoteLiteral(names_.name(slot)), ",", QuoteLiteral(wanted.Get(slot)),
                      ",false)");
    }
    if (!expected.empty()) expected.push_back(';');
    std::string sql;
    EXPECT_EQ(BuildParamSync(names_, wanted, current, &sql), !expected.empty());
    ASSERT_EQ(sql, expected) << "round " << round;
  }
  EXPECT_GT(equal_sets, 1000);  // the shortcut was taken
}

TEST_F(BuildParamSyncTest, AReportedListIsPassedWholeAsText) {
  // PostgreSQL 18 reports search_path as '"$user", public': one text for set_config to parse.
  wanted_.Set(5, "\"$user\", public, \"we'ird, schema\"");
  std::string sql;
  EXPECT_TRUE(BuildParamSync(names_, wanted_, current_, &sql));
  EXPECT_EQ(sql,
            "SELECT pg_catalog.set_config('search_path',"
            "'\"$user\", public, \"we''ird, schema\"',false);");
}

TEST(QuoteLiteralTest, PlainValue) {
  EXPECT_EQ(QuoteLiteral("UTC"), "'UTC'");
  EXPECT_EQ(QuoteLiteral(""), "''");
}

TEST(QuoteLiteralTest, DoublesSingleQuotes) {
  EXPECT_EQ(QuoteLiteral("it's"), "'it''s'");
  EXPECT_EQ(QuoteLiteral("'"), "''''");
  EXPECT_EQ(QuoteLiteral("'; DROP TABLE t; --"), "'''; DROP TABLE t; --'");
}

TEST(QuoteLiteralTest, BackslashesUseEscapeStringForm) {
  EXPECT_EQ(QuoteLiteral("a\\b"), "E'a\\\\b'");
  EXPECT_EQ(QuoteLiteral("\\"), "E'\\\\'");
  // A trailing backslash must not escape the closing quote.
  EXPECT_EQ(QuoteLiteral("x\\'"), "E'x\\\\'''");
  EXPECT_EQ(QuoteLiteral("O'Re\\illy"), "E'O''Re\\\\illy'");
}

TEST(CanonicalParamValueTest, ClientEncodingTakesPostgresSpelling) {
  EXPECT_EQ(CanonicalParamValue("client_encoding", "utf8"), "UTF8");
  EXPECT_EQ(CanonicalParamValue("client_encoding", "UTF-8"), "UTF8");
  EXPECT_EQ(CanonicalParamValue("CLIENT_ENCODING", "unicode"), "UTF8");
  EXPECT_EQ(CanonicalParamValue("client_encoding", "Latin-1"), "LATIN1");
  EXPECT_EQ(CanonicalParamValue("client_encoding", "iso_8859_5"), "ISO_8859_5");
  EXPECT_EQ(CanonicalParamValue("client_encoding", "euc_jp"), "EUC_JP");
  EXPECT_EQ(CanonicalParamValue("client_encoding", "windows-1252"), "WIN1252");
  EXPECT_EQ(CanonicalParamValue("client_encoding", "SQL_ASCII"), "SQL_ASCII");
  // Unknown encodings are left for the server to refuse; other parameters are not touched.
  EXPECT_EQ(CanonicalParamValue("client_encoding", "klingon"), "klingon");
  EXPECT_EQ(CanonicalParamValue("application_name", "utf8"), "utf8");
  EXPECT_EQ(CanonicalParamValue("DateStyle", "iso, mdy"), "iso, mdy");
}

}  // namespace
}  // namespace pgfleet::pool
