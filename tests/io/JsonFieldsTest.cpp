// io::JsonFields: absent keys keep the default, wrong types name the source and key.
#include <gtest/gtest.h>

#include <functional>

#include "common/Error.h"
#include "io/JsonFields.h"

namespace strata::io {
namespace {

std::string errorOf(const std::function<void()>& f) {
  try {
    f();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(JsonFields, AbsentAndNullKeysKeepTheDefault) {
  const auto j = nlohmann::json::parse(R"({"a": null})");
  const JsonFields f(j, "cfg.json");
  int64_t a = 7, b = 8;
  EXPECT_FALSE(f.read("a", a));
  EXPECT_FALSE(f.read("b", b));
  EXPECT_EQ(a, 7);
  EXPECT_EQ(b, 8);
  EXPECT_EQ(f.number("b", 2.5), 2.5);
  EXPECT_EQ(f.text("b", "x"), "x");
}

TEST(JsonFields, ReadsEachSupportedType) {
  const auto j = nlohmann::json::parse(R"({"i": 3, "d": 1e-6, "di": 2, "b": true, "s": "t5", "v": [16, 56, 56]})");
  const JsonFields f(j, "cfg.json");
  int i = 0;
  double d = 0, di = 0;
  bool b = false;
  std::string s;
  std::vector<int64_t> v;
  EXPECT_TRUE(f.read("i", i));
  EXPECT_TRUE(f.read("d", d));
  EXPECT_TRUE(f.read("di", di));  // an integer is a number
  EXPECT_TRUE(f.read("b", b));
  EXPECT_TRUE(f.read("s", s));
  EXPECT_TRUE(f.read("v", v));
  EXPECT_EQ(i, 3);
  EXPECT_DOUBLE_EQ(d, 1e-6);
  EXPECT_DOUBLE_EQ(di, 2.0);
  EXPECT_TRUE(b);
  EXPECT_EQ(s, "t5");
  EXPECT_EQ(v, (std::vector<int64_t>{16, 56, 56}));
}

TEST(JsonFields, WrongTypesNameTheSourceAndKey) {
  const auto j = nlohmann::json::parse(R"({"i": 2.5, "b": "yes", "v": [1, "x"], "s": 4, "o": {"k": 1}})");
  const JsonFields f(j, "/m/config.json");
  int64_t i = 0;
  bool b = false;
  std::vector<int64_t> v;
  std::string s;
  EXPECT_EQ(errorOf([&] { f.read("i", i); }), "/m/config.json: key 'i': expected an integer, got 2.5");
  EXPECT_EQ(errorOf([&] { f.read("b", b); }), "/m/config.json: key 'b': expected true or false, got \"yes\"");
  EXPECT_EQ(errorOf([&] { f.read("v", v); }), "/m/config.json: key 'v': expected an integer, got \"x\"");
  EXPECT_EQ(errorOf([&] { f.read("s", s); }), "/m/config.json: key 's': expected a string, got 4");
  EXPECT_EQ(errorOf([&] { f.integer("missing"); }), "/m/config.json: key 'missing': missing (required)");
  const JsonFields nested(j["o"], "/m/config.json", "o.");
  EXPECT_EQ(errorOf([&] { nested.text("k", ""); }), "/m/config.json: key 'o.k': expected a string, got 1");
  EXPECT_EQ(errorOf([&] { JsonFields(j["i"], "/m/config.json"); }), "/m/config.json: expected a JSON object, got 2.5");
}

}  // namespace
}  // namespace strata::io

// Issue 32: an integer is checked against its field's type before narrowing
// (4294967296 into an int was read as 0, 2^64-1 into an int64 as -1).
TEST(JsonFields, IntegersThatDoNotFitTheirFieldAreRefused) {
  const auto j = nlohmann::json::parse(R"({"i": 4294967296, "u": 18446744073709551615, "n": -1, "ok": 7})");
  const strata::io::JsonFields f(j, "config.json");
  int i = 0;
  int64_t u = 0;
  uint32_t n = 0;
  for (const auto& read :
       std::vector<std::function<void()>>{[&] { f.read("i", i); }, [&] { f.read("u", u); }, [&] { f.read("n", n); }}) {
    try {
      read();
      ADD_FAILURE() << "read without an error: " << i << " " << u << " " << n;
    } catch (const strata::ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("config.json: key '"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("out of range"), std::string::npos) << e.what();
    }
  }
  EXPECT_TRUE(f.read("ok", i));
  EXPECT_EQ(i, 7);
}
