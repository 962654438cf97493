// ClientSession's settings (client_session.h): what a client SET, what it gave at startup for a
// parameter the servers do not report, and the statements that carry them between servers.
#include "pooler/relay/client_session.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "pooler/relay/param_sync.h"
#include "pooler/sql/statement_classifier.h"

namespace pgfleet::pool {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;
using ::testing::Pair;

sql::Effect Set(std::string_view name, std::string_view value) {
  return sql::SetConfigEffect(name, value);
}
sql::Effect Reset(std::string_view name) {
  return sql::Effect{sql::EffectKind::kReset, std::string(name), "", ""};
}

std::string Value(const ClientSession& session, std::string_view name) {
  auto it = session.settings().find(name);
  return it == session.settings().end() ? "<none>" : it->second.apply_sql;
}

TEST(ClientSessionTest, StartupSettingsAreWhatResetReturnsTo) {
  ClientSession session;
  session.SetStartup(Set("search_path", "app"));
  session.Apply(Set("search_path", "other"));
  session.Apply(Set("work_mem", "8MB"));
  EXPECT_EQ(Value(session, "search_path"), Set("search_path", "other").apply_sql);
  session.Apply(Reset("search_path"));
  EXPECT_EQ(Value(session, "search_path"), Set("search_path", "app").apply_sql);
  session.Apply(Reset("work_mem"));  // no startup value: gone
  EXPECT_EQ(Value(session, "work_mem"), "<none>");

  session.Apply(Set("search_path", "other"));
  session.Apply(Set("work_mem", "8MB"));
  session.Apply(sql::Effect{sql::EffectKind::kResetAll, "", "", ""});
  EXPECT_THAT(session.settings(),
              ElementsAre(Pair("search_path", SessionSetting{Set("search_path", "app").apply_sql,
                                                             "RESET \"search_path\""})));

  session.Apply(Set("search_path", "other"));
  session.Apply(sql::Effect{sql::EffectKind::kDiscardAll, "", "", ""});
  EXPECT_EQ(Value(session, "search_path"), Set("search_path", "app").apply_sql);
}

// The scenario that showed the need, on PostgreSQL 15 with one server: a client SETs
// search_path; the next client gave search_path at startup; the one after gave nothing.
TEST(ClientSessionTest, AStartupValueIsCarriedAndUndoneLikeASet) {
  TrackedParamNames names({"search_path"});
  const int slot = names.Find("search_path");
  ASSERT_GE(slot, 0);
  ParamSet server_defaults(names.size());
  server_defaults.Set(0, "UTF8");  // client_encoding is reported; search_path is not

  ClientSession setter;
  setter.Apply(Set("search_path", "set_schema"));

  ParamSet startup_params(names.size());
  startup_params.Set(static_cast<size_t>(slot), "startup_schema");
  startup_params.Set(0, "UTF8");
  ClientSession startup;
  CarryUnreportedStartupParams(names, server_defaults, &startup_params, &startup);
  // Out of the parameter sync (which would send it with every link, and could not undo it)...
  EXPECT_FALSE(startup_params.IsSet(static_cast<size_t>(slot)));
  EXPECT_TRUE(startup_params.IsSet(0));  // reported parameters stay there
  // ...into the session's settings.
  EXPECT_EQ(Value(startup, "search_path"), Set("search_path", "startup_schema").apply_sql);

  ClientSession plain;
  // The server after the setter's transaction, then the startup client's link: its value, and
  // no RESET after it that would undo it.
  std::string sql;
  EXPECT_TRUE(BuildSessionSync(startup.settings(), setter.settings(), &sql));
  EXPECT_EQ(sql, Set("search_path", "startup_schema").apply_sql + ";");
  // The plain client after it: the startup value is undone, not left to it.
  sql.clear();
  EXPECT_TRUE(BuildSessionSync(plain.settings(), startup.settings(), &sql));
  EXPECT_EQ(sql, "RESET \"search_path\";");
}

TEST(ClientSessionTest, ReportedParametersAreLeftToTheParameterSync) {
  TrackedParamNames names({"search_path"});
  ParamSet server_defaults(names.size());
  for (size_t slot = 0; slot < names.size(); ++slot) server_defaults.Set(slot, "x");
  ParamSet params(names.size());
  params.Set(static_cast<size_t>(names.Find("search_path")), "app");
  ClientSession session;
  CarryUnreportedStartupParams(names, server_defaults, &params, &session);
  EXPECT_TRUE(params.IsSet(static_cast<size_t>(names.Find("search_path"))));
  EXPECT_THAT(session.settings(), IsEmpty());
}

}  // namespace
}  // namespace pgfleet::pool
