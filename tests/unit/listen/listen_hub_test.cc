// The LISTEN hub's decisions (listen_hub.h): which idle client messages it answers, what its
// server is told as clients come and go, when LISTEN answers are due, who gets each
// notification, and the bounded per-client queue.
#include "pooler/listen/listen_hub.h"

#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "pooler/protocol/builders.h"
#include "pooler/relay/relay.h"
#include "tests/unit/protocol/test_bytes.h"

namespace pgfleet::pool {
namespace listen_hub_test {

using protocol::StringSink;
using protocol::testing::AsBytes;
using protocol::testing::AsString;
using protocol::testing::Build;
using protocol::testing::I32;
using protocol::testing::Typed;
using ::testing::ElementsAre;
using ::testing::IsEmpty;

std::string Query(std::string_view sql) {
  return Build([&](StringSink& s) { protocol::BuildQuery(s, sql); });
}
std::string Ready(char status = 'I') {
  return Build([&](StringSink& s) { protocol::BuildReadyForQuery(s, status); });
}
std::string Complete(std::string_view tag) {
  return Build([&](StringSink& s) { protocol::BuildCommandComplete(s, tag); });
}
std::string NotificationBody(int32_t pid, std::string_view channel, std::string_view payload) {
  return I32(static_cast<uint32_t>(pid)) + std::string(channel) + '\0' + std::string(payload) +
         '\0';
}

// A client that records what the hub hands it.
class FakeListener final : public NotificationListener {
 public:
  void OnListenAnswered(std::span<const uint8_t> answer) override {
    answers.emplace_back(AsString(answer));
  }
  void OnNotification(std::string_view channel, std::span<const uint8_t> message) override {
    channels.emplace_back(channel);
    notifications.emplace_back(AsString(message));
  }
  std::vector<std::string> answers;
  std::vector<std::string> channels;
  std::vector<std::string> notifications;
};

IdleListen Read(const std::string& bytes) {
  ClientStream client(1u << 20, 0);
  return ReadIdleListen(client, AsBytes(bytes), 1u << 20);
}

TEST(ReadIdleListenTest, OneListenOrUnlistenAsASimpleQuery) {
  IdleListen listen = Read(Query("LISTEN Jobs"));
  EXPECT_EQ(listen.kind, IdleListen::Kind::kListen);
  EXPECT_EQ(listen.channel, "jobs");  // folded, as PostgreSQL folds it
  EXPECT_EQ(listen.consumed, Query("LISTEN Jobs").size());
  EXPECT_EQ(Read(Query(R"(  listen "Mixed ""Case""";)")).channel, "Mixed \"Case\"");
  EXPECT_EQ(Read(Query("/* c */ UNLISTEN jobs")).kind, IdleListen::Kind::kUnlisten);
  EXPECT_EQ(Read(Query("UNLISTEN *")).kind, IdleListen::Kind::kUnlistenAll);
  EXPECT_EQ(Read(Query("unlisten *")).kind, IdleListen::Kind::kUnlistenAll);
  EXPECT_EQ(Read(Query("(LISTEN a)")).kind, IdleListen::Kind::kNone);  // not LISTEN's grammar
  // Only the first message counts; what follows waits for the next call.
  EXPECT_EQ(Read(Query("LISTEN a") + Query("SELECT 1")).consumed, Query("LISTEN a").size());
}

TEST(ReadIdleListenTest, EveryOtherFormGoesToAServer) {
  for (const char* sql : {"LISTEN a; SELECT 1", "SELECT 1; LISTEN a", "BEGIN; LISTEN a; COMMIT",
                          "NOTIFY a", "SELECT 1", "LISTEN", "LISTEN a b", "SET x = 1"}) {
    EXPECT_EQ(Read(Query(sql)).kind, IdleListen::Kind::kNone) << sql;
  }
  // Extended protocol, or a Query not whole yet.
  const std::string parse =
      Build([](StringSink& s) { protocol::BuildParse(s, "", "LISTEN a", {}); });
  EXPECT_EQ(Read(parse).kind, IdleListen::Kind::kNone);
  const std::string whole = Query("LISTEN a");
  EXPECT_EQ(Read(whole.substr(0, whole.size() - 1)).kind, IdleListen::Kind::kNone);
  // A client inside a message (a long one streamed in pieces) is not between messages.
  ClientStream mid(1u << 20, 0);
  const std::string big = Query(std::string(100, 'x'));
  mid.decoder.Take(mid.decoder.Peek(AsBytes(std::string_view(big).substr(0, 10))));
  ASSERT_TRUE(mid.mid_message());
  EXPECT_EQ(ReadIdleListen(mid, AsBytes(Query("LISTEN a")), 1u << 20).kind,
            IdleListen::Kind::kNone);
}

// What psycopg 3 and pgjdbc send for a statement without parameters.
std::string Extended(std::string_view sql, char describe = 'P') {
  return Build([&](StringSink& s) {
    protocol::BuildParse(s, "", sql, {});
    protocol::BuildBindText(s, "", "", {});
    if (describe != 0) protocol::BuildDescribe(s, describe, "");
    protocol::BuildExecute(s, "", 0);
    protocol::BuildSync(s);
  });
}

TEST(ReadIdleListenTest, TheUnnamedStatementOfTheExtendedProtocolToo) {
  ClientStream client(1u << 20, 0);
  client.statement_effects[""] = {sql::Effect{sql::EffectKind::kPrepare, "p", "", ""}};
  client.unnamed_refused = true;
  const std::string batch = Extended("LISTEN Jobs");
  IdleListen listen = ReadIdleListen(client, AsBytes(batch + Query("SELECT 1")), 1u << 20);
  EXPECT_EQ(listen.kind, IdleListen::Kind::kListen);
  EXPECT_EQ(listen.channel, "jobs");
  EXPECT_EQ(listen.consumed, batch.size());
  EXPECT_EQ(listen.prefix, Build([](StringSink& s) {
              protocol::BuildParseComplete(s);
              protocol::BuildBindComplete(s);
              protocol::BuildNoData(s);
            }));
  // The unnamed statement is the LISTEN now, not what the client had before.
  EXPECT_TRUE(client.statement_effects.empty());
  EXPECT_FALSE(client.unnamed_refused);
  EXPECT_EQ(Read(Extended("UNLISTEN *", 0)).prefix, Build([](StringSink& s) {
              protocol::BuildParseComplete(s);
              protocol::BuildBindComplete(s);
            }));
  EXPECT_EQ(Read(Extended("UNLISTEN a", 'S')).prefix, Build([](StringSink& s) {
              protocol::BuildParseComplete(s);
              protocol::BuildBindComplete(s);
              protocol::BuildParameterDescription(s, {});
              protocol::BuildNoData(s);
            }));
  // Named statements, parameters, a batch without its Sync, or other statements: a server's.
  const std::string named = Build([](StringSink& s) {
    protocol::BuildParse(s, "s1", "LISTEN a", {});
    protocol::BuildBindText(s, "", "s1", {});
    protocol::BuildExecute(s, "", 0);
    protocol::BuildSync(s);
  });
  const std::string_view one[] = {"x"};
  const std::string with_params = Build([&](StringSink& s) {
    protocol::BuildParse(s, "", "LISTEN a", {});
    protocol::BuildBindText(s, "", "", one);
    protocol::BuildExecute(s, "", 0);
    protocol::BuildSync(s);
  });
  const std::string unsynced = Extended("LISTEN a");
  for (const std::string& bytes : {named, with_params, unsynced.substr(0, unsynced.size() - 5),
                                   Extended("SELECT 1"), Extended("LISTEN a; SELECT 1")}) {
    EXPECT_EQ(Read(bytes).kind, IdleListen::Kind::kNone);
  }
}

TEST(ReadIdleListenTest, AnswersAsPostgreSQLDoes) {
  EXPECT_EQ(Build([](StringSink& s) { BuildListenAnswer(s, IdleListen::Kind::kListen); }),
            Complete("LISTEN") + Ready('I'));
  EXPECT_EQ(Build([](StringSink& s) { BuildListenAnswer(s, IdleListen::Kind::kUnlistenAll); }),
            Complete("UNLISTEN") + Ready('I'));
}

class ListenHubTest : public ::testing::Test {
 protected:
  // The server answers the oldest command: CommandComplete, ReadyForQuery.
  void Answer(std::string_view tag) {
    hub_.OnServerMessage('C', AsBytes(tag));
    hub_.OnServerMessage('Z', AsBytes("I"));
  }
  void Notify(std::string_view channel, std::string_view payload, int32_t pid = 4242) {
    const std::string body = NotificationBody(pid, channel, payload);
    hub_.OnServerMessage('A', AsBytes(body));
  }
  // Runs a client's LISTEN; true when answered at once.
  bool Listen(FakeListener& l, const std::string& channel) {
    StringSink answer;
    const bool now = hub_.Listen(&l, channel, answer);
    EXPECT_EQ(answer.bytes(), now ? Complete("LISTEN") + Ready('I') : "");
    return now;
  }

  ListenHub hub_;
  FakeListener a_, b_, c_;
};

TEST_F(ListenHubTest, TheFirstListenWaitsForTheServerAndLaterOnesAreAnsweredAtOnce) {
  EXPECT_FALSE(hub_.wants_server());
  EXPECT_FALSE(Listen(a_, "jobs"));
  EXPECT_TRUE(hub_.wants_server());
  EXPECT_EQ(hub_.TakeOutput(), "");  // nothing to send before a server
  EXPECT_FALSE(Listen(b_, "jobs"));  // waits with the first
  hub_.OnServer();
  EXPECT_FALSE(hub_.wants_server());
  EXPECT_EQ(hub_.TakeOutput(), Query(R"(LISTEN "jobs")"));  // once for the channel
  EXPECT_THAT(hub_.TakeAnswers(), IsEmpty());
  Answer("LISTEN");
  auto answers = hub_.TakeAnswers();
  ASSERT_EQ(answers.size(), 2u);
  EXPECT_EQ(answers[0].first, &a_);
  EXPECT_EQ(answers[1].first, &b_);
  EXPECT_EQ(answers[0].second, Complete("LISTEN") + Ready('I'));
  // The server listens: a third client is answered at once, and nothing is sent.
  EXPECT_TRUE(Listen(c_, "jobs"));
  EXPECT_TRUE(Listen(c_, "jobs"));  // again: PostgreSQL answers a repeated LISTEN too
  EXPECT_EQ(hub_.TakeOutput(), "");
  EXPECT_EQ(hub_.listener_count(), 3u);
}

TEST_F(ListenHubTest, NotificationsReachOnlyTheChannelsListenersWithTheServersMessage) {
  hub_.OnServer();
  EXPECT_FALSE(Listen(a_, "jobs"));
  EXPECT_FALSE(Listen(b_, "Mixed \"Case\""));
  EXPECT_EQ(hub_.TakeOutput(), Query(R"(LISTEN "jobs")") + Query(R"(LISTEN "Mixed ""Case""")"));
  Answer("LISTEN");
  Answer("LISTEN");
  Notify("jobs", "hello", 77);
  Notify("Mixed \"Case\"", "m");
  Notify("mixed \"case\"", "folded");  // another channel
  Notify("nobody", "x");
  EXPECT_THAT(a_.channels, ElementsAre("jobs"));
  // The message as the server sent it: the NOTIFYing backend's pid.
  EXPECT_THAT(a_.notifications, ElementsAre(Typed('A', NotificationBody(77, "jobs", "hello"))));
  EXPECT_THAT(b_.channels, ElementsAre("Mixed \"Case\""));
  EXPECT_EQ(hub_.notifications_received(), 4u);
}

TEST_F(ListenHubTest, AClientWaitingForItsListenGetsNothingBeforeItsAnswer) {
  hub_.OnServer();
  EXPECT_FALSE(Listen(a_, "jobs"));
  (void)hub_.TakeOutput();
  // The server's LISTEN committed and a NOTIFY came before its ReadyForQuery.
  hub_.OnServerMessage('C', AsBytes("LISTEN"));
  Notify("jobs", "early");
  EXPECT_THAT(a_.notifications, IsEmpty());
  hub_.OnServerMessage('Z', AsBytes("I"));
  EXPECT_EQ(hub_.TakeAnswers().size(), 1u);
  Notify("jobs", "late");
  EXPECT_EQ(a_.notifications.size(), 1u);
}

TEST_F(ListenHubTest, UnlistenStopsDeliveryAtOnceAndTheLastOneGivesTheServerBack) {
  hub_.OnServer();
  EXPECT_FALSE(Listen(a_, "jobs"));
  EXPECT_FALSE(Listen(b_, "jobs"));
  EXPECT_FALSE(Listen(b_, "audit"));
  (void)hub_.TakeOutput();
  Answer("LISTEN");
  Answer("LISTEN");
  (void)hub_.TakeAnswers();
  hub_.Unlisten(&a_, "jobs");
  EXPECT_EQ(hub_.TakeOutput(), "");  // b still listens on jobs
  EXPECT_FALSE(hub_.Listens(&a_, "jobs"));
  Notify("jobs", "x");
  EXPECT_THAT(a_.notifications, IsEmpty());
  EXPECT_EQ(b_.notifications.size(), 1u);
  hub_.Unlisten(&a_, "never");  // not listening: nothing happens
  hub_.Unlisten(&b_, "audit");
  EXPECT_EQ(hub_.TakeOutput(), Query(R"(UNLISTEN "audit")"));
  EXPECT_FALSE(hub_.TakeServerBack());
  Answer("UNLISTEN");
  EXPECT_FALSE(hub_.TakeServerBack());  // b listens on jobs
  hub_.Remove(&b_);                     // b disconnects
  EXPECT_EQ(hub_.listener_count(), 0u);
  EXPECT_EQ(hub_.TakeOutput(), Query("UNLISTEN *"));
  EXPECT_FALSE(hub_.TakeServerBack());  // not before UNLISTEN * is answered
  Answer("UNLISTEN");
  EXPECT_TRUE(hub_.TakeServerBack());
  EXPECT_FALSE(hub_.has_server());
  EXPECT_FALSE(hub_.wants_server());
}

TEST_F(ListenHubTest, AListenSentBehindUnlistenAllIsAnsweredByItsOwnCommand) {
  hub_.OnServer();
  EXPECT_FALSE(Listen(a_, "jobs"));
  hub_.Remove(&a_);  // leaves before its answer
  EXPECT_FALSE(Listen(b_, "jobs"));
  EXPECT_EQ(hub_.TakeOutput(),
            Query(R"(LISTEN "jobs")") + Query("UNLISTEN *") + Query(R"(LISTEN "jobs")"));
  Answer("LISTEN");
  EXPECT_THAT(hub_.TakeAnswers(), IsEmpty());  // the first LISTEN was undone by UNLISTEN *
  Answer("UNLISTEN");
  EXPECT_THAT(hub_.TakeAnswers(), IsEmpty());
  Answer("LISTEN");
  auto answers = hub_.TakeAnswers();
  ASSERT_EQ(answers.size(), 1u);
  EXPECT_EQ(answers[0].first, &b_);
  EXPECT_FALSE(hub_.TakeServerBack());
}

TEST_F(ListenHubTest, AFailedListenAnswersTheServersErrorAndListensOnNothing) {
  hub_.OnServer();
  EXPECT_FALSE(Listen(a_, "jobs"));
  (void)hub_.TakeOutput();
  const std::string error = "SERROR\0C42602\0Minvalid\0\0";
  hub_.OnServerMessage('E', AsBytes(std::string_view(error.data(), error.size())));
  hub_.OnServerMessage('Z', AsBytes("I"));
  auto answers = hub_.TakeAnswers();
  ASSERT_EQ(answers.size(), 1u);
  EXPECT_EQ(answers[0].second, Typed('E', error) + Ready('I'));
  EXPECT_EQ(hub_.listener_count(), 0u);
  EXPECT_EQ(hub_.TakeOutput(), "");
  EXPECT_TRUE(hub_.TakeServerBack());
}

TEST_F(ListenHubTest, ALostServerIsReplacedAndEveryChannelListenedAgain) {
  hub_.OnServer();
  EXPECT_FALSE(Listen(a_, "b"));
  EXPECT_FALSE(Listen(b_, "a"));
  (void)hub_.TakeOutput();
  Answer("LISTEN");  // "b" confirmed; "a" still waits
  EXPECT_EQ(hub_.TakeAnswers().size(), 1u);
  hub_.OnServerLost();
  EXPECT_TRUE(hub_.wants_server());
  EXPECT_FALSE(Listen(c_, "b"));  // not confirmed on any server now: waits
  hub_.OnServer();
  EXPECT_EQ(hub_.TakeOutput(), Query(R"(LISTEN "a")") + Query(R"(LISTEN "b")"));
  Answer("LISTEN");
  Answer("LISTEN");
  auto answers = hub_.TakeAnswers();
  ASSERT_EQ(answers.size(), 2u);
  EXPECT_EQ(answers[0].first, &b_);
  EXPECT_EQ(answers[1].first, &c_);
  Notify("b", "again");
  EXPECT_EQ(a_.notifications.size(), 1u);
  EXPECT_EQ(c_.notifications.size(), 1u);
}

TEST_F(ListenHubTest, UnlistensCommittedThroughAServerStopTheHubsDeliveriesToo) {
  hub_.OnServer();
  EXPECT_FALSE(Listen(a_, "x"));
  EXPECT_FALSE(Listen(a_, "y"));
  EXPECT_FALSE(Listen(a_, "z"));
  (void)hub_.TakeOutput();
  for (int i = 0; i < 3; ++i) Answer("LISTEN");
  hub_.ApplyUnlistened(&a_, {"x"});
  EXPECT_FALSE(hub_.Listens(&a_, "x"));
  EXPECT_TRUE(hub_.Listens(&a_, "y"));
  hub_.ApplyUnlistened(&a_, {""});  // UNLISTEN * or DISCARD ALL
  EXPECT_EQ(hub_.listener_count(), 0u);
  EXPECT_EQ(hub_.TakeOutput(),
            Query(R"(UNLISTEN "x")") + Query(R"(UNLISTEN "y")") + Query("UNLISTEN *"));
}

TEST_F(ListenHubTest, WaitingClientsAreTakenOutWhenNoServerComes) {
  EXPECT_FALSE(Listen(a_, "jobs"));
  EXPECT_FALSE(Listen(b_, "jobs"));
  EXPECT_FALSE(Listen(b_, "audit"));
  EXPECT_THAT(hub_.TakeWaiting(), ElementsAre(&b_, &a_));  // by channel name, each once
  EXPECT_EQ(hub_.listener_count(), 0u);
  EXPECT_FALSE(hub_.wants_server());
}

TEST(NotificationQueueTest, KeepsOrderAndDropsTheOldestWhenFull) {
  NotificationQueue queue;
  EXPECT_TRUE(queue.empty());
  EXPECT_EQ(queue.Push(AsBytes("one")), 0u);
  EXPECT_EQ(queue.Push(AsBytes("two")), 0u);
  StringSink sink;
  queue.TakeAll(sink);
  EXPECT_EQ(sink.bytes(), "onetwo");
  EXPECT_TRUE(queue.empty());
  const std::string big(NotificationQueue::kMaxBytes / 4, 'x');
  for (int i = 0; i < 4; ++i) EXPECT_EQ(queue.Push(AsBytes(big)), 0u);
  EXPECT_EQ(queue.Push(AsBytes("last")), 1u);  // the first big one goes
  EXPECT_EQ(queue.size(), 4u);
  StringSink rest;
  queue.TakeAll(rest);
  EXPECT_EQ(rest.bytes().size(), 3 * big.size() + 4);
  EXPECT_TRUE(rest.bytes().ends_with("last"));
}

TEST(ClientSessionTest, UnlistensThroughTheRelayAreRecordedForTheHub) {
  ClientSession session;
  session.Apply(sql::Effect{sql::EffectKind::kListen, "a", "", ""});
  EXPECT_TRUE(session.ListensOnServer("a"));
  session.Apply(sql::Effect{sql::EffectKind::kUnlisten, "a", "", ""});
  EXPECT_FALSE(session.ListensOnServer("a"));
  session.Apply(sql::Effect{sql::EffectKind::kUnlistenAll, "", "", ""});
  session.Apply(sql::Effect{sql::EffectKind::kDiscardAll, "", "", ""});
  EXPECT_THAT(session.unlistened, ElementsAre("a", "", ""));
}

}  // namespace listen_hub_test
}  // namespace pgfleet::pool
