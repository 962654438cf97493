// Tests for pooler/auth/secret.h.
#include "pooler/auth/secret.h"

#include "gtest/gtest.h"

namespace pgfleet::auth {
namespace {

TEST(ClassifySecretTest, Empty) { EXPECT_EQ(ClassifySecret(""), SecretKind::kEmpty); }

TEST(ClassifySecretTest, Md5NeedsPrefixAnd32LowerCaseHexDigits) {
  EXPECT_EQ(ClassifySecret("md553f48b7c4b76a86ce72276c5755f217d"), SecretKind::kMd5);
  // As in PostgreSQL, anything else is a plain password that merely looks like a hash.
  EXPECT_EQ(ClassifySecret("md553F48B7C4B76A86CE72276C5755F217D"), SecretKind::kPlain);
  EXPECT_EQ(ClassifySecret("MD553f48b7c4b76a86ce72276c5755f217d"), SecretKind::kPlain);
  EXPECT_EQ(ClassifySecret("md553f48b7c4b76a86ce72276c5755f217"), SecretKind::kPlain);
  EXPECT_EQ(ClassifySecret("md553f48b7c4b76a86ce72276c5755f217d0"), SecretKind::kPlain);
  EXPECT_EQ(ClassifySecret("md553f48b7c4b76a86ce72276c5755f217g"), SecretKind::kPlain);
}

TEST(ClassifySecretTest, ScramByPrefix) {
  EXPECT_EQ(ClassifySecret("SCRAM-SHA-256$4096:9/VorCDbKqo94z7ZSOo6Lg==$2lFDLgY1Hj1XEKx086Gvp0zG1+"
                           "k2Fcp5G86dQ3laFOY=:UbIkxSgVJAhln1KLLy19RgL7D82Y3f2crDalXuO1h5o="),
            SecretKind::kScramSha256);
  EXPECT_EQ(ClassifySecret("SCRAM-SHA-256$broken"), SecretKind::kScramSha256);
  EXPECT_EQ(ClassifySecret("scram-sha-256$4096:x"), SecretKind::kPlain);
}

TEST(ClassifySecretTest, Plain) {
  EXPECT_EQ(ClassifySecret("secret"), SecretKind::kPlain);
  EXPECT_EQ(ClassifySecret("md5"), SecretKind::kPlain);
}

}  // namespace
}  // namespace pgfleet::auth
