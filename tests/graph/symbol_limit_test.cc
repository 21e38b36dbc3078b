// The symbol table is bounded (issue #22, item 12): text from input that would grow it
// past its limit gets ResourceExhausted naming the limit, from the interner and from the
// model loader, instead of an abort. The real limit is 15.7M symbols; these tests lower
// it (symbol_internal::SetInputSymbolLimitForTesting) just above what the process holds,
// so the code path is the real one and the test interns a handful of names.
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "graph/serialization.h"
#include "graph/symbol.h"
#include "gtest/gtest.h"

namespace fuselage {
namespace {

// Lowers the input limit to `room` symbols past what the table holds, for one test.
class SymbolLimitTest : public testing::Test {
 protected:
  void SetRoom(uint32_t room) {
    // TableSize() counts the empty symbol, which is no symbol the limit counts.
    previous_ = symbol_internal::SetInputSymbolLimitForTesting(Symbol::TableSize() - 1 + room);
  }
  void TearDown() override { symbol_internal::SetInputSymbolLimitForTesting(previous_); }
  uint32_t previous_ = Symbol::kInputSymbolLimit;
};

TEST_F(SymbolLimitTest, TryInternFailsPastTheLimitAndKeepsWhatIsInterned) {
  const Symbol known = Symbol::Intern("symbol_limit_test.known");
  SetRoom(3);
  for (int i = 0; i < 3; ++i) {
    auto s = Symbol::TryIntern(absl::StrCat("symbol_limit_test.new_", i));
    ASSERT_TRUE(s.ok()) << i << ": " << s.status();
    EXPECT_EQ(s->name(), absl::StrCat("symbol_limit_test.new_", i));
  }
  const uint32_t size = Symbol::TableSize();
  auto full = Symbol::TryIntern("symbol_limit_test.one_too_many");
  ASSERT_FALSE(full.ok());
  EXPECT_EQ(full.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(full.status().message().find("symbol table full"), absl::string_view::npos)
      << full.status();
  EXPECT_NE(full.status().message().find(absl::StrCat(size - 1, " symbols")),
            absl::string_view::npos)
      << "the message names the limit: " << full.status();
  EXPECT_EQ(Symbol::TableSize(), size) << "a refused name is not stored";
  EXPECT_TRUE(Symbol::Lookup("symbol_limit_test.one_too_many").empty());
  // Text interned before still interns (no growth), and the library's own names may use
  // the reserve above the input limit.
  auto again = Symbol::TryIntern("symbol_limit_test.known");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(*again, known);
  EXPECT_FALSE(Symbol::Intern("symbol_limit_test.library_name").empty());
}

TEST_F(SymbolLimitTest, LoaderReturnsResourceExhaustedForAFileWithTooManyNewNames) {
  std::string nodes = R"pb(nodes { name: "x" op: PLACEHOLDER target: "x" })pb";
  std::string last = "x";
  for (int i = 0; i < 20; ++i) {
    const std::string name = absl::StrCat("r", i);
    absl::StrAppend(&nodes, "nodes { name: '", name, "' op: CALL_FUNCTION target: ",
                    "'symbol_limit_test.hostile_function_", i, "' args { node: '", last, "' } }\n");
    last = name;
  }
  absl::StrAppend(&nodes, "nodes { name: 'output' op: OUTPUT target: 'output' args { node: '",
                  last, "' } }\n");
  const std::string text = absl::StrCat("format_version: 1\ngraph {\n", nodes,
                                        "}\nroot { type: 'GraphModule' }\n");
  Symbol::Intern("GraphModule");  // the loader's own name, interned before the limit
  SetRoom(5);
  auto loaded = ParseModelText(text);
  ASSERT_FALSE(loaded.ok());
  EXPECT_EQ(loaded.status().code(), absl::StatusCode::kResourceExhausted) << loaded.status();
  EXPECT_NE(loaded.status().message().find("symbol table full"), absl::string_view::npos)
      << loaded.status();
  // With room for every name the same file loads.
  SetRoom(100);
  auto ok = ParseModelText(text);
  EXPECT_TRUE(ok.ok()) << ok.status();
}

}  // namespace
}  // namespace fuselage
