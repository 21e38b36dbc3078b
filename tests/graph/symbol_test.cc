// Symbol interning: the same text always gives the same id and back the same text, new
// text a new id, Lookup never interns, and all of it holds while the table grows (many
// times here) and while threads intern and look up the same names at once.
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "graph/symbol.h"
#include "gtest/gtest.h"

namespace fuselage {
namespace {

TEST(SymbolTest, SameTextSameSymbolAndBack) {
  const Symbol a = Symbol::Intern("symbol_test.alpha");
  const Symbol b = Symbol::Intern("symbol_test.beta");
  EXPECT_NE(a, b);
  EXPECT_EQ(Symbol::Intern(std::string("symbol_test.") + "alpha"), a);
  EXPECT_EQ(a.name(), "symbol_test.alpha");
  EXPECT_EQ(b.str(), "symbol_test.beta");
  EXPECT_EQ(Symbol::Lookup("symbol_test.alpha"), a);
}

TEST(SymbolTest, EmptyTextIsTheEmptySymbol) {
  EXPECT_TRUE(Symbol::Intern("").empty());
  EXPECT_EQ(Symbol::Intern("").id(), 0u);
  EXPECT_EQ(Symbol::Intern("").name(), "");
  EXPECT_TRUE(Symbol::Lookup("").empty());
  EXPECT_EQ(Symbol().name(), "");
}

TEST(SymbolTest, LookupDoesNotIntern) {
  EXPECT_TRUE(Symbol::Lookup("symbol_test.never_interned").empty());
  EXPECT_TRUE(Symbol::Lookup("symbol_test.never_interned").empty());
  const Symbol s = Symbol::Intern("symbol_test.never_interned");
  EXPECT_FALSE(s.empty());
  EXPECT_EQ(Symbol::Lookup("symbol_test.never_interned"), s);
  // Prefixes and extensions of interned text are other text.
  EXPECT_TRUE(Symbol::Lookup("symbol_test.never_intern").empty());
  EXPECT_TRUE(Symbol::Lookup("symbol_test.never_interned_").empty());
}

// 200k names grow the name -> id table from its initial 4096 slots many times; every name
// keeps its id and text, and ids are distinct.
TEST(SymbolTest, LookupManyAnswersWhatLookupAnswersForEachName) {
  // More names than one group, mixing interned, never-interned and empty text.
  std::vector<std::string> texts;
  std::vector<Symbol> expected;
  for (int i = 0; i < 50; ++i) {
    texts.push_back(absl::StrCat("lookup_many_", i));
    expected.push_back(i % 3 == 0 ? Symbol::Intern(texts.back()) : Symbol());
    if (i % 7 == 0) {
      texts.push_back("");
      expected.push_back(Symbol());
    }
  }
  std::vector<absl::string_view> names(texts.begin(), texts.end());
  std::vector<Symbol> out(names.size(), Symbol::Intern("sentinel"));
  Symbol::LookupMany(names, out.data());
  for (size_t i = 0; i < names.size(); ++i) {
    EXPECT_EQ(out[i], expected[i]) << "'" << names[i] << "'";
    EXPECT_EQ(out[i], Symbol::Lookup(names[i])) << "'" << names[i] << "'";
  }
  Symbol::LookupMany({}, nullptr);  // nothing to do
}

TEST(SymbolTest, IdsSurviveGrowth) {
  constexpr int kNames = 200000;
  std::vector<Symbol> symbols;
  symbols.reserve(kNames);
  for (int i = 0; i < kNames; ++i) symbols.push_back(Symbol::Intern(absl::StrCat("grow", i)));
  for (int i = 0; i < kNames; ++i) {
    const std::string name = absl::StrCat("grow", i);
    ASSERT_EQ(symbols[static_cast<size_t>(i)].name(), name);
    ASSERT_EQ(Symbol::Lookup(name), symbols[static_cast<size_t>(i)]) << name;
    ASSERT_EQ(Symbol::Intern(name), symbols[static_cast<size_t>(i)]) << name;
    if (i > 0) {
      ASSERT_EQ(symbols[static_cast<size_t>(i)].id(), symbols[static_cast<size_t>(i - 1)].id() + 1);
    }
  }
}

// Interned text is stored in 64 KiB blocks: names that fill several blocks, one longer
// than a block, and names after it keep their text and ids.
TEST(SymbolTest, LongNamesAcrossTextBlocksKeepTheirText) {
  std::vector<std::string> names;
  for (int i = 0; i < 3000; ++i) {
    names.push_back(absl::StrCat("text_block_", i, "_", std::string(100, 'a' + i % 26)));
  }
  names.push_back(std::string(100000, 'z'));
  for (int i = 0; i < 10; ++i) names.push_back(absl::StrCat("after_the_long_one_", i));
  std::vector<Symbol> symbols;
  for (const std::string& name : names) symbols.push_back(Symbol::Intern(name));
  for (size_t i = 0; i < names.size(); ++i) {
    ASSERT_EQ(symbols[i].name(), names[i]) << i;
    ASSERT_EQ(Symbol::Lookup(names[i]), symbols[i]) << i;
    ASSERT_EQ(Symbol::Intern(names[i]), symbols[i]) << i;
  }
  EXPECT_TRUE(Symbol::Lookup(std::string(99999, 'z')).empty());
}

// Four threads intern the same 50k new names, each in its own order, and look up names
// the others may be interning: each name gets one id, whoever interned it first.
TEST(SymbolTest, ConcurrentInterningAgrees) {
  constexpr int kThreads = 4;
  constexpr int kNames = 50000;
  std::vector<std::vector<Symbol>> seen(kThreads, std::vector<Symbol>(kNames));
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([t, &seen] {
      for (int k = 0; k < kNames; ++k) {
        // Thread t visits name (k * kStride[t] + t) mod kNames: a different order each
        // (the strides are coprime with kNames, so each thread visits every name).
        constexpr int64_t kStride[kThreads] = {1, 3, 7, 11};
        const int i = static_cast<int>((k * kStride[t] + t) % kNames);
        const std::string name = absl::StrCat("concurrent", i);
        const Symbol looked_up = Symbol::Lookup(name);
        const Symbol interned = Symbol::Intern(name);
        if (!looked_up.empty() && looked_up != interned) std::abort();
        seen[static_cast<size_t>(t)][static_cast<size_t>(i)] = interned;
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  std::vector<bool> id_used;
  for (int i = 0; i < kNames; ++i) {
    const Symbol s = seen[0][static_cast<size_t>(i)];
    ASSERT_EQ(s.name(), absl::StrCat("concurrent", i));
    for (int t = 1; t < kThreads; ++t) ASSERT_EQ(seen[static_cast<size_t>(t)][static_cast<size_t>(i)], s);
    if (id_used.size() <= s.id()) id_used.resize(s.id() + 1);
    ASSERT_FALSE(id_used[s.id()]) << "id " << s.id() << " given twice";
    id_used[s.id()] = true;
  }
}

}  // namespace
}  // namespace fuselage
