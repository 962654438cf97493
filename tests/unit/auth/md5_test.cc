// Tests for pooler/auth/md5.h against hashes from Python's hashlib and from PostgreSQL 15.
#include "pooler/auth/md5.h"

#include <array>
#include <cstdint>

#include "gtest/gtest.h"

namespace pgfleet::auth {
namespace {

constexpr std::array<uint8_t, 4> kSalt = {0x01, 0x02, 0x03, 0x04};
// hashlib: "md5" + md5(b"secretpostgres").hexdigest()
constexpr std::string_view kPostgresSecretHash = "md553f48b7c4b76a86ce72276c5755f217d";
// hashlib: "md5" + md5(b"53f48b7c..." + bytes([1, 2, 3, 4])).hexdigest()
constexpr std::string_view kPostgresSecretResponse = "md5bb41a296aab6baccb36ff243a562abff";

TEST(Md5PasswordHashTest, MatchesKnownVector) {
  EXPECT_EQ(Md5PasswordHash("postgres", "secret"), kPostgresSecretHash);
}

TEST(Md5PasswordHashTest, MatchesWhatPostgresStores) {
  // pg_authid.rolpassword after `SET password_encryption = 'md5'; ALTER ROLE md5u PASSWORD
  // 'secret'` on PostgreSQL 15.
  EXPECT_EQ(Md5PasswordHash("md5u", "secret"), "md5ad16ab8cb9f9946be08171afa599199d");
}

TEST(Md5SaltedResponseTest, MatchesKnownVector) {
  EXPECT_EQ(Md5SaltedResponse(kPostgresSecretHash, kSalt), kPostgresSecretResponse);
}

TEST(Md5SaltedResponseTest, AcceptsHashWithoutPrefix) {
  EXPECT_EQ(Md5SaltedResponse(kPostgresSecretHash.substr(3), kSalt), kPostgresSecretResponse);
}

TEST(VerifyMd5ResponseTest, AcceptsRightResponseForPlainSecret) {
  EXPECT_TRUE(VerifyMd5Response("secret", "postgres", kSalt, kPostgresSecretResponse));
}

TEST(VerifyMd5ResponseTest, AcceptsRightResponseForMd5Secret) {
  EXPECT_TRUE(VerifyMd5Response(kPostgresSecretHash, "postgres", kSalt, kPostgresSecretResponse));
}

TEST(VerifyMd5ResponseTest, RejectsWrongPassword) {
  const std::string response = Md5SaltedResponse(Md5PasswordHash("postgres", "Secret"), kSalt);
  EXPECT_FALSE(VerifyMd5Response("secret", "postgres", kSalt, response));
  EXPECT_FALSE(VerifyMd5Response(kPostgresSecretHash, "postgres", kSalt, response));
}

TEST(VerifyMd5ResponseTest, RejectsOtherSalt) {
  constexpr std::array<uint8_t, 4> other = {0x01, 0x02, 0x03, 0x05};
  EXPECT_FALSE(VerifyMd5Response("secret", "postgres", other, kPostgresSecretResponse));
}

TEST(VerifyMd5ResponseTest, PlainSecretIsSaltedWithTheUserName) {
  EXPECT_FALSE(VerifyMd5Response("secret", "postgres2", kSalt, kPostgresSecretResponse));
}

TEST(VerifyMd5ResponseTest, RejectsMangledResponses) {
  EXPECT_FALSE(VerifyMd5Response("secret", "postgres", kSalt, ""));
  EXPECT_FALSE(VerifyMd5Response("secret", "postgres", kSalt, kPostgresSecretResponse.substr(1)));
  EXPECT_FALSE(
      VerifyMd5Response("secret", "postgres", kSalt, std::string(kPostgresSecretResponse) + "0"));
  EXPECT_FALSE(
      VerifyMd5Response("secret", "postgres", kSalt, "MD5BB41A296AAB6BACCB36FF243A562ABFF"));
  // Sending the stored hash itself is not a response.
  EXPECT_FALSE(VerifyMd5Response("secret", "postgres", kSalt, kPostgresSecretHash));
}

TEST(VerifyMd5ResponseTest, EmptySecretNeverAuthenticates) {
  const std::string response = Md5SaltedResponse(Md5PasswordHash("postgres", ""), kSalt);
  EXPECT_FALSE(VerifyMd5Response("", "postgres", kSalt, response));
}

TEST(VerifyMd5ResponseTest, ScramSecretCannotAnswerMd5) {
  EXPECT_FALSE(VerifyMd5Response("SCRAM-SHA-256$4096:c2FsdA==$AAAA:AAAA", "postgres", kSalt,
                                 kPostgresSecretResponse));
}

}  // namespace
}  // namespace pgfleet::auth
