#include "pooler/sql/statement_classifier.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

namespace pgfleet::sql {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

std::vector<EffectKind> Kinds(std::string_view sql) {
  std::vector<EffectKind> kinds;
  for (const Effect& e : Classify(sql).effects) kinds.push_back(e.kind);
  return kinds;
}

TEST(MayChangeSessionTest, TheHotPathIsNeverParsed) {
  EXPECT_FALSE(MayChangeSession("SELECT abalance FROM pgbench_accounts WHERE aid = $1"));
  EXPECT_FALSE(MayChangeSession("SELECT abalance FROM pgbench_accounts WHERE aid = 42;"));
  EXPECT_FALSE(
      MayChangeSession("UPDATE pgbench_tellers SET tbalance = tbalance + 1 WHERE tid = 1"));
  EXPECT_FALSE(MayChangeSession("INSERT INTO pgbench_history (tid, bid) VALUES (1, 2)"));
  EXPECT_FALSE(MayChangeSession("BEGIN"));
  EXPECT_FALSE(MayChangeSession("COMMIT;"));
  EXPECT_FALSE(MayChangeSession("  END ; "));
  EXPECT_FALSE(MayChangeSession(""));
  EXPECT_FALSE(MayChangeSession("SELECT 'settings' AS config_set"));
}

TEST(MayChangeSessionTest, EverythingThatMayChangeASessionIsLetThrough) {
  EXPECT_TRUE(MayChangeSession("SET search_path = app"));
  EXPECT_TRUE(MayChangeSession("  set statement_timeout to 5000"));
  EXPECT_TRUE(MayChangeSession("/* app */ RESET ALL"));
  EXPECT_TRUE(MayChangeSession("-- note\nDISCARD ALL"));
  EXPECT_TRUE(MayChangeSession("PREPARE q AS SELECT 1"));
  EXPECT_TRUE(MayChangeSession("deallocate q"));
  EXPECT_TRUE(MayChangeSession("DECLARE c CURSOR WITH HOLD FOR SELECT 1"));
  EXPECT_TRUE(MayChangeSession("CLOSE c"));
  EXPECT_TRUE(MayChangeSession("LISTEN jobs"));
  EXPECT_TRUE(MayChangeSession("UNLISTEN *"));
  EXPECT_TRUE(MayChangeSession("CREATE TEMP TABLE t (a int)"));
  EXPECT_TRUE(MayChangeSession("DROP TABLE t"));
  EXPECT_TRUE(MayChangeSession("SELECT pg_advisory_lock(1)"));
  EXPECT_TRUE(MayChangeSession("select PG_TRY_ADVISORY_LOCK(1, 2)"));
  EXPECT_TRUE(MayChangeSession("SELECT set_config('a.b', 'c', false)"));
  EXPECT_TRUE(MayChangeSession("BEGIN; SET LOCAL work_mem = '8MB'; SELECT 1"));
  EXPECT_TRUE(MayChangeSession("(SELECT pg_advisory_unlock_all())"));
  EXPECT_TRUE(MayChangeSession("SELECT 1 INTO TEMP t"));
  // Block comments nest: the statement is the SET after the outer comment's end.
  EXPECT_TRUE(MayChangeSession("/* a /* b */ c */ SET x.y = 1"));
}

TEST(MayChangeSessionTest, FunctionNamesAndTempInAnyCaseAndAtTheEdges) {
  EXPECT_TRUE(MayChangeSession("SELECT SeT_CoNfIg('a.b', 'c', false)"));
  EXPECT_TRUE(MayChangeSession("SELECT Pg_Advisory_Xact_Lock(1)"));
  EXPECT_TRUE(MayChangeSession("SELECT 1 INTO TeMp t"));
  EXPECT_TRUE(MayChangeSession("SELECT 1 INTO temp"));  // "temp" as the last bytes
  EXPECT_TRUE(MayChangeSession("advisory_x"));          // the underscore right after 8 letters
  EXPECT_FALSE(MayChangeSession("SELECT 1 FROM te"));   // "te" at the end: no read past it
  EXPECT_FALSE(MayChangeSession("SELECT a_b, set_conf FROM t"));
  EXPECT_FALSE(MayChangeSession("SELECT a FROM t;;"));  // only empty statements after the ';'
  // "set" + "_config" needs both halves; bytes that only look alike after | 0x20 do not match.
  EXPECT_FALSE(MayChangeSession("SELECT se4_config(1)"));
  EXPECT_FALSE(
      MayChangeSession("SELECT \x14"
                       "EMP"));
}

// The one-pass scan agrees with the plain definition (lower-case the text, then look for
// "advisory_", "set_config", "temp" and a ';' followed by more than blanks and ';') on random
// texts over an alphabet of the bytes that matter, and of those that look like them to the
// eight-bytes-at-a-time test (0x1b and 0x7f are ';' and '_' once | 0x20; 0x14 and 0x54 are "4"
// and "t"), in texts long enough to span several eight-byte words at every offset.
TEST(MayChangeSessionTest, AgreesWithThePlainDefinitionOnRandomTexts) {
  constexpr std::string_view kAlphabet =
      "aAdDvViIsSoOrRyYtTeEmMpPcCnNfFgG_; x\n4T\x14\x1b\x7f\xdb\xff";
  const auto plain = [](std::string_view sql) {
    std::string lower(sql);
    for (char& c : lower) {
      if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    }
    if (lower.find("advisory_") != std::string::npos ||
        lower.find("set_config") != std::string::npos || lower.find("temp") != std::string::npos) {
      return true;
    }
    for (size_t at = lower.find(';'); at != std::string::npos; at = lower.find(';', at + 1)) {
      if (lower.find_first_not_of(" \n;", at + 1) != std::string::npos) return true;
    }
    return false;
  };
  uint64_t state = 0x9e3779b97f4a7c15u;
  for (int round = 0; round < 40000; ++round) {
    std::string text = "SELECT ";  // an ordinary first word: only the scan decides
    state = state * 6364136223846793005u + 1442695040888963407u;
    const size_t length = (state >> 33) % 41;
    for (size_t i = 0; i < length; ++i) {
      state = state * 6364136223846793005u + 1442695040888963407u;
      text.push_back(kAlphabet[(state >> 33) % kAlphabet.size()]);
    }
    ASSERT_EQ(MayChangeSession(text), plain(text)) << "text: " << text;
  }
}

TEST(ClassifyTest, SessionSettingsAndTheirResets) {
  auto c = Classify("SET search_path TO app, public");
  ASSERT_TRUE(c.parsed);
  ASSERT_EQ(c.effects.size(), 1u);
  EXPECT_EQ(c.effects[0].kind, EffectKind::kSet);
  EXPECT_EQ(c.effects[0].name, "search_path");
  EXPECT_EQ(c.effects[0].apply_sql, "SET search_path TO app, public");
  EXPECT_EQ(c.effects[0].reset_sql, "RESET \"search_path\"");

  c = Classify("SET SESSION AUTHORIZATION alice");
  ASSERT_EQ(c.effects.size(), 1u);
  EXPECT_EQ(c.effects[0].reset_sql, "RESET SESSION AUTHORIZATION");

  EXPECT_THAT(Kinds("SET LOCAL statement_timeout = 10"), IsEmpty());
  EXPECT_THAT(Kinds("SET TRANSACTION ISOLATION LEVEL SERIALIZABLE"), IsEmpty());
  EXPECT_THAT(Kinds("SET TIME ZONE DEFAULT"), ElementsAre(EffectKind::kReset));
  EXPECT_THAT(Kinds("RESET work_mem"), ElementsAre(EffectKind::kReset));
  EXPECT_THAT(Kinds("RESET ALL"), ElementsAre(EffectKind::kResetAll));
  EXPECT_THAT(Kinds("SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY"),
              ElementsAre(EffectKind::kSet));
}

TEST(ClassifyTest, EachStatementOfAQueryKeepsItsOwnText) {
  auto c = Classify("SET a.x = 1; SELECT 1; SET work_mem = '8MB'");
  ASSERT_EQ(c.effects.size(), 2u);
  EXPECT_EQ(c.effects[0].apply_sql, "SET a.x = 1");
  EXPECT_EQ(c.effects[1].name, "work_mem");
  EXPECT_EQ(c.effects[1].apply_sql, " SET work_mem = '8MB'");
}

TEST(ClassifyTest, SetConfigWithConstantsIsASetting) {
  auto c = Classify("SELECT set_config('app.user', 'o''brien', false)");
  ASSERT_EQ(c.effects.size(), 1u);
  EXPECT_EQ(c.effects[0].name, "app.user");
  EXPECT_EQ(c.effects[0].apply_sql, "SELECT pg_catalog.set_config('app.user', 'o''brien', false)");
  EXPECT_THAT(Kinds("SELECT set_config('app.user', 'x', true)"), IsEmpty());
  EXPECT_THAT(Kinds("SELECT set_config('app.user', current_user, false)"), IsEmpty());
}

TEST(ClassifyTest, ObjectsThatPinAndWhatReleasesThem) {
  EXPECT_THAT(Kinds("CREATE TEMP TABLE t (a int)"), ElementsAre(EffectKind::kCreateTemp));
  EXPECT_THAT(Kinds("CREATE TEMPORARY TABLE t AS SELECT 1"), ElementsAre(EffectKind::kCreateTemp));
  EXPECT_THAT(Kinds("CREATE TEMP TABLE t (a int) ON COMMIT DROP"), IsEmpty());
  EXPECT_THAT(Kinds("CREATE TABLE t (a int)"), IsEmpty());
  EXPECT_THAT(Kinds("CREATE TEMP VIEW v AS SELECT 1"), ElementsAre(EffectKind::kCreateTemp));
  EXPECT_THAT(Kinds("SELECT 1 INTO TEMP t"), ElementsAre(EffectKind::kCreateTemp));
  auto drop = Classify("DROP TABLE IF EXISTS pg_temp.t, u");
  ASSERT_EQ(drop.effects.size(), 2u);
  EXPECT_EQ(drop.effects[0].name, "t");
  EXPECT_EQ(drop.effects[1].name, "u");
  EXPECT_THAT(Kinds("DISCARD TEMP"), ElementsAre(EffectKind::kDiscardTemp));
  EXPECT_THAT(Kinds("DISCARD ALL"), ElementsAre(EffectKind::kDiscardAll));
  EXPECT_THAT(Kinds("DISCARD PLANS"), IsEmpty());

  EXPECT_THAT(Kinds("PREPARE q (int) AS SELECT $1"), ElementsAre(EffectKind::kPrepare));
  EXPECT_THAT(Kinds("DEALLOCATE PREPARE q"), ElementsAre(EffectKind::kDeallocate));
  EXPECT_THAT(Kinds("DEALLOCATE ALL"), ElementsAre(EffectKind::kDeallocateAll));

  EXPECT_THAT(Kinds("DECLARE c CURSOR WITH HOLD FOR SELECT 1"),
              ElementsAre(EffectKind::kDeclareHold));
  EXPECT_THAT(Kinds("DECLARE c CURSOR FOR SELECT 1"), IsEmpty());
  EXPECT_THAT(Kinds("CLOSE c"), ElementsAre(EffectKind::kClose));
  EXPECT_THAT(Kinds("CLOSE ALL"), ElementsAre(EffectKind::kCloseAll));

  EXPECT_THAT(Kinds("LISTEN jobs"), ElementsAre(EffectKind::kListen));
  EXPECT_THAT(Kinds("UNLISTEN jobs"), ElementsAre(EffectKind::kUnlisten));
  EXPECT_THAT(Kinds("UNLISTEN *"), ElementsAre(EffectKind::kUnlistenAll));
}

TEST(ClassifyTest, AdvisoryLocksWhereverTheyAreCalled) {
  EXPECT_THAT(Kinds("SELECT pg_advisory_lock(42)"), ElementsAre(EffectKind::kAdvisoryLock));
  EXPECT_THAT(Kinds("SELECT pg_catalog.pg_try_advisory_lock(1, 2) AS got"),
              ElementsAre(EffectKind::kTryAdvisoryLock));
  EXPECT_THAT(Kinds("SELECT CASE WHEN pg_try_advisory_lock_shared(7) THEN 1 END FROM t"),
              ElementsAre(EffectKind::kTryAdvisoryLock));
  EXPECT_THAT(Kinds("SELECT pg_advisory_unlock(42)"), ElementsAre(EffectKind::kAdvisoryUnlock));
  EXPECT_THAT(Kinds("SELECT pg_advisory_unlock_all()"),
              ElementsAre(EffectKind::kAdvisoryUnlockAll));
  // Transaction-level locks end with their transaction.
  EXPECT_THAT(Kinds("SELECT pg_advisory_xact_lock(42)"), IsEmpty());
}

TEST(ClassifyTest, TextPostgreSQLWouldRejectChangesNothing) {
  auto c = Classify("SET search_path TO");
  EXPECT_FALSE(c.parsed);
  EXPECT_THAT(c.effects, IsEmpty());
}

TEST(ClassifyTest, CountsTheStatementsOfAQuery) {
  EXPECT_EQ(Classify("LISTEN a").statements, 1);
  EXPECT_EQ(Classify("LISTEN a;").statements, 1);
  EXPECT_EQ(Classify("LISTEN a; SELECT 1").statements, 2);
  EXPECT_EQ(Classify("LISTEN").statements, 0);  // does not parse
}

TEST(StartsWithOtherLetterTest, OnlyAFirstLetterOutsideTheInitialsSays) {
  EXPECT_TRUE(StartsWithOtherLetter("SELECT 1", "lu"));
  EXPECT_TRUE(StartsWithOtherLetter("select 1", "d"));
  EXPECT_FALSE(StartsWithOtherLetter("LISTEN a", "lu"));
  EXPECT_FALSE(StartsWithOtherLetter("unlisten *", "lu"));
  EXPECT_FALSE(StartsWithOtherLetter("Deallocate x", "d"));
  // Blanks, comments and parentheses first: the full check decides.
  for (const char* sql : {" SELECT 1", "/* c */ SELECT 1", "-- c\nSELECT 1", "(SELECT 1)", ""}) {
    EXPECT_FALSE(StartsWithOtherLetter(sql, "lu")) << sql;
  }
}

TEST(StartsWithListenVerbTest, OnlyListenAndUnlistenAfterBlanksAndComments) {
  EXPECT_TRUE(StartsWithListenVerb("LISTEN a"));
  EXPECT_TRUE(StartsWithListenVerb(" /* x */ unlisten *"));
  EXPECT_TRUE(StartsWithListenVerb("-- c\nListen a"));
  EXPECT_FALSE(StartsWithListenVerb("LISTENER"));
  EXPECT_FALSE(StartsWithListenVerb("NOTIFY a"));
  EXPECT_FALSE(StartsWithListenVerb("SELECT 1; LISTEN a"));
  EXPECT_EQ(QuoteIdentifier("Mixed \"Case\""), "\"Mixed \"\"Case\"\"\"");
}

std::vector<uint32_t> SchemaChanges(std::string_view sql) {
  std::vector<uint32_t> statements;
  for (const Effect& e : Classify(sql).schema_changes) {
    EXPECT_EQ(e.kind, EffectKind::kSchemaChange);
    statements.push_back(e.statement);
  }
  return statements;
}

TEST(StatementClassifierTest, SchemaChangesAreKeptApartFromTheSessionsEffects) {
  EXPECT_TRUE(MayChangeSession("ALTER TABLE t DROP COLUMN b"));
  EXPECT_TRUE(MayChangeSession("  alter type mood add value 'x'"));
  EXPECT_THAT(SchemaChanges("ALTER TABLE t DROP COLUMN b"), ElementsAre(0u));
  EXPECT_THAT(Classify("ALTER TABLE t DROP COLUMN b").effects, IsEmpty());
  EXPECT_THAT(SchemaChanges("CREATE TYPE mood AS ENUM ('a')"), ElementsAre(0u));
  EXPECT_THAT(SchemaChanges("/* c */ DROP TYPE mood"), ElementsAre(0u));
  EXPECT_THAT(SchemaChanges("CREATE TEMP TABLE t (a int) ON COMMIT DROP"), ElementsAre(0u));
  EXPECT_THAT(SchemaChanges("SELECT 1 INTO TEMP t"), ElementsAre(0u));
  EXPECT_THAT(SchemaChanges("DISCARD ALL"), IsEmpty());
  EXPECT_THAT(SchemaChanges("BEGIN; SELECT 1; ALTER TABLE t ADD c int; COMMIT"), ElementsAre(2u));
  EXPECT_THAT(SchemaChanges("SET search_path = a"), IsEmpty());
  EXPECT_THAT(SchemaChanges("SELECT createdat FROM t"), IsEmpty());
  // The session's effects are as before.
  EXPECT_THAT(Kinds("CREATE TEMP TABLE t (a int)"), ElementsAre(EffectKind::kCreateTemp));
}

}  // namespace
}  // namespace pgfleet::sql
