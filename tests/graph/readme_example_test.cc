// The C++ example of docs/guide/cpp_api.md, verbatim between the markers, so the guide stays
// true.
#include <unistd.h>

#include <cstdlib>
#include <iostream>
#include <sstream>

#include "graph/graph_module.h"
#include "graph/printer.h"
#include "graph/serialization.h"
#include "graph/status_macros.h"
#include "gtest/gtest.h"

namespace {

// Runs the snippet with std::cout captured; it saves "model.pb" in the working
// directory, which the test points at its scratch directory.
absl::Status ReadmeExample(std::ostream& out) {
  std::streambuf* saved = std::cout.rdbuf(out.rdbuf());
  struct Restore {
    std::streambuf* buf;
    ~Restore() { std::cout.rdbuf(buf); }
  } restore{saved};
  // ---- README begin
  fuselage::GraphModule gm;
  auto conv = std::make_unique<fuselage::Module>("nn.Conv2d");
  conv->SetTensor("weight", fuselage::Tensor::FromFloats({1, 1, 1, 1}, {0.5f}));
  RETURN_IF_ERROR(gm.SetModule("conv", std::move(conv)));
  RETURN_IF_ERROR(gm.SetModule("relu", std::make_unique<fuselage::Module>("nn.ReLU")));
  fuselage::Graph& g = gm.graph();
  ASSIGN_OR_RETURN(fuselage::Node* x, g.AddPlaceholder("x"));
  ASSIGN_OR_RETURN(fuselage::Node* c, g.AddCallModule("conv", {x}));
  ASSIGN_OR_RETURN(fuselage::Node* add, g.AddCallFunction("operator.add", {c, x}));
  ASSIGN_OR_RETURN(fuselage::Node* relu, g.AddCallModule("relu", {add}));
  RETURN_IF_ERROR(g.SetOutput(relu).status());
  RETURN_IF_ERROR(gm.Verify());            // order, use-lists, names, targets, arity
  std::cout << fuselage::PrintCode(gm);    // add = conv + x ...
  RETURN_IF_ERROR(fuselage::SaveModel(gm, "model.pb"));
  // ---- README end
  return absl::OkStatus();
}

TEST(ReadmeExampleTest, RunsAndPrintsTheGraph) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = tmp != nullptr ? tmp : "/tmp";
  ASSERT_EQ(chdir(dir.c_str()), 0);
  std::ostringstream out;
  ASSERT_TRUE(ReadmeExample(out).ok());
  EXPECT_EQ(out.str(),
            "def forward(self, x):\n"
            "    conv = self.conv(x)\n"
            "    add = conv + x\n"
            "    relu = self.relu(add)\n"
            "    return relu\n");
  EXPECT_TRUE(fuselage::LoadModel(dir + "/model.pb").ok());
}

}  // namespace
