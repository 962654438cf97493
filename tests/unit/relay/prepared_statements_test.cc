// Statement interning and the per-server statement cache: content-derived names, LRU eviction, and
// what moving a server between workers needs (InLruOrder, Adopt).
#include "pooler/relay/prepared_statements.h"

#include <atomic>
#include <string>
#include <string_view>
#include <vector>

#include "gtest/gtest.h"

namespace pgfleet::pool {
namespace {

using namespace std::string_literals;

std::vector<std::string> Names(const std::vector<StatementPtr>& statements) {
  std::vector<std::string> names;
  for (const StatementPtr& statement : statements) names.push_back(statement->server_name);
  return names;
}

TEST(StatementRegistryTest, NameIsAShaPrefixOfTheParseTail) {
  StatementRegistry registry;
  // sha256("select 1\0\0\0") = 7564e853d733d68343faa17c9a20341076f01a3f...
  const StatementPtr statement = registry.Intern("select 1\0\0\0"s);
  EXPECT_EQ(statement->server_name, "pgfleet_7564e853d733d68343faa17c9a203410");
  EXPECT_EQ(statement->server_name, StatementServerName("select 1\0\0\0"s));
  EXPECT_LT(statement->server_name.size(), 63u) << "NAMEDATALEN";
}

TEST(StatementRegistryTest, EveryWorkerNamesAStatementAlike) {
  StatementRegistry first;
  StatementRegistry second;
  // Different interning orders: per-worker counters would disagree here.
  const StatementPtr a1 = first.Intern("select 1\0\0\0"s);
  const StatementPtr b1 = first.Intern("select 2\0\0\0"s);
  const StatementPtr b2 = second.Intern("select 2\0\0\0"s);
  const StatementPtr a2 = second.Intern("select 1\0\0\0"s);
  EXPECT_EQ(a1->server_name, a2->server_name);
  EXPECT_EQ(b1->server_name, b2->server_name);
  EXPECT_NE(a1->server_name, b1->server_name);
  // Parameter types are part of the statement.
  EXPECT_NE(first.Intern("select $1\0\0\1\0\0\0\x17"s)->server_name,
            first.Intern("select $1\0\0\1\0\0\0\x19"s)->server_name);
}

TEST(StatementRegistryTest, ACachedStatementStaysInterned) {
  StatementRegistry registry;
  ServerStatementCache cache;
  const PreparedStatement* original = nullptr;
  {
    StatementPtr statement = registry.Intern("select 1\0\0\0"s);
    original = statement.get();
    EXPECT_TRUE(cache.Add(statement, 10).empty());
  }
  // No client holds it; the server does, so the worker still knows it as the same statement.
  const StatementPtr again = registry.Intern("select 1\0\0\0"s);
  EXPECT_EQ(again.get(), original);
  EXPECT_TRUE(cache.Contains(*again));
}

TEST(ServerStatementCacheTest, EvictionReturnsTheLeastRecentlyUsed) {
  StatementRegistry registry;
  ServerStatementCache cache;
  const StatementPtr a = registry.Intern("a"s);
  const StatementPtr b = registry.Intern("b"s);
  const StatementPtr c = registry.Intern("c"s);
  EXPECT_TRUE(cache.Add(a, 2).empty());
  EXPECT_TRUE(cache.Add(b, 2).empty());
  cache.Touch(*a);
  EXPECT_EQ(Names(cache.Add(c, 2)), std::vector<std::string>{b->server_name});
  EXPECT_FALSE(cache.Contains(*b));
  EXPECT_EQ(Names(cache.InLruOrder()), (std::vector<std::string>{a->server_name, c->server_name}));
  // Adding what it has only touches it.
  EXPECT_TRUE(cache.Add(a, 2).empty());
  EXPECT_EQ(Names(cache.InLruOrder()), (std::vector<std::string>{c->server_name, a->server_name}));
  cache.Remove(*c);
  EXPECT_EQ(cache.size(), 1u);
  cache.Clear();
  EXPECT_EQ(cache.size(), 0u);
}

TEST(ServerStatementCacheTest, InLruOrderAndAdoptRebuildTheCacheInAnotherWorker) {
  StatementRegistry sender;
  ServerStatementCache sent;
  for (const char* tail : {"a", "b", "c"}) sent.Add(sender.Intern(tail), 3);
  sent.Touch(*sender.Intern("a"));
  const std::vector<StatementPtr> order = sent.InLruOrder();
  EXPECT_EQ(Names(order),
            (std::vector<std::string>{StatementServerName("b"), StatementServerName("c"),
                                      StatementServerName("a")}));

  StatementRegistry receiver;
  ServerStatementCache received;
  for (const StatementPtr& statement : order) {
    received.Adopt(receiver.Intern(statement->parse_tail));
  }
  EXPECT_EQ(Names(received.InLruOrder()), Names(order));
  EXPECT_TRUE(received.Contains(*receiver.Intern("c")));
  // The adopted order decides eviction: "b" is the least recently used.
  EXPECT_EQ(Names(received.Add(receiver.Intern("d"), 3)),
            std::vector<std::string>{StatementServerName("b")});
}

TEST(ServerStatementCacheTest, AddEvictsDownToCapacityAfterAnOversizedAdopt) {
  StatementRegistry registry;
  ServerStatementCache cache;
  // A server moved in from a worker with a larger max_prepared_statements.
  for (const char* tail : {"a", "b", "c"}) cache.Adopt(registry.Intern(tail));
  EXPECT_EQ(cache.size(), 3u);
  EXPECT_EQ(Names(cache.Add(registry.Intern("d"), 2)),
            (std::vector<std::string>{StatementServerName("a"), StatementServerName("b")}));
  EXPECT_EQ(Names(cache.InLruOrder()),
            (std::vector<std::string>{StatementServerName("c"), StatementServerName("d")}));
}

TEST(StatementRegistryTest, ASchemaChangeGivesEveryTextANewStatementOfItsOwnName) {
  StatementRegistry registry;
  const StatementPtr before = registry.Intern("select 1\0\0\0"s);
  EXPECT_EQ(before->epoch, 0u);
  registry.SchemaChanged();
  const StatementPtr after = registry.Intern("select 1\0\0\0"s);
  EXPECT_NE(after.get(), before.get());
  EXPECT_EQ(after->epoch, 1u);
  EXPECT_EQ(after->server_name, before->server_name + "_1");
  EXPECT_EQ(after->server_name, StatementServerName("select 1\0\0\0"s, 1));
  EXPECT_LT(StatementServerName("x"s, ~uint64_t{0}).size(), 64u) << "NAMEDATALEN";
  // The holder of the old one keeps it; a Parse in the new epoch shares the new one.
  EXPECT_EQ(registry.Intern("select 1\0\0\0"s).get(), after.get());
  EXPECT_EQ(registry.counters().schema_changes, 1u);
}

TEST(StatementRegistryTest, TheEpochIsTheSharedOneAndARemoteChangeNotifiesNobody) {
  std::atomic<uint64_t> pod_epoch{0};
  StatementRegistry first;
  StatementRegistry second;
  first.set_shared_epoch(&pod_epoch);
  second.set_shared_epoch(&pod_epoch);
  int notices = 0;
  first.set_on_schema_change([&] { ++notices; });
  const StatementPtr old = second.Intern("select 1\0\0\0"s);
  first.SchemaChanged();
  EXPECT_EQ(notices, 1);
  EXPECT_NE(second.Intern("select 1\0\0\0"s)->server_name, old->server_name);
  first.OnRemoteSchemaChange();
  EXPECT_EQ(notices, 1);
  EXPECT_EQ(pod_epoch.load(), 2u);
}

TEST(StatementRegistryTest, AStatementOfAnotherEpochMovedInKeepsItsName) {
  StatementRegistry registry;
  registry.SchemaChanged();
  registry.SchemaChanged();
  // A sibling's server still has the epoch-1 statement: its name, not interned for Parses.
  const StatementPtr moved = registry.InternAt("select 1\0\0\0"s, 1);
  EXPECT_EQ(moved->server_name, StatementServerName("select 1\0\0\0"s, 1));
  EXPECT_NE(registry.Intern("select 1\0\0\0"s).get(), moved.get());
  // One of the current epoch is the interned one.
  EXPECT_EQ(registry.InternAt("select 1\0\0\0"s, 2).get(),
            registry.Intern("select 1\0\0\0"s).get());
}

TEST(StaleStatementErrorTest, OnlyTheErrorsOfAPlanThatNoLongerFitsTheSchema) {
  EXPECT_TRUE(IsStaleStatementError("0A000", "anything, translated", "RevalidateCachedQuery"));
  EXPECT_TRUE(IsStaleStatementError("0A000", "cached plan must not change result type", ""));
  EXPECT_TRUE(IsStaleStatementError("XX000", "cache lookup failed for type 16390", "typeidType"));
  EXPECT_FALSE(
      IsStaleStatementError("0A000", "FOR UPDATE is not allowed", "transformLockingClause"));
  EXPECT_FALSE(IsStaleStatementError("XX000", "unexpected end of data", ""));
  EXPECT_FALSE(IsStaleStatementError("42703", "column \"b\" does not exist", "errorMissingColumn"));
}

}  // namespace
}  // namespace pgfleet::pool
