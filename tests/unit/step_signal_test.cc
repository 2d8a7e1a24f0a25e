// A rank's step figures (common/step_signal.h) cross every hop whole: the
// rank link's text line, the agent's wire message, the controller's signal.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "bulwark.pb.h"
#include "rank_client/rank_link.h"
#include "common/step_signal.h"

namespace bulwark {
namespace {

// Every field set to a value of its own, none its default.
struct Filler {
  int n = 0;
  size_t fields = 0;
  void Set(int64_t& x) { x = 1000 + ++n; }
  void Set(int& x) { x = ++n; }
  void Set(double& x) { x = ++n + 0.5; }
  void Set(bool& x) {
    ++n;
    x = true;
  }
  void Set(std::string& x) {
    ++n;
    x = "spike";  // the only values a halted step may carry: "nan" or "spike"
  }
  template <typename T>
  void operator()(const char*, T& x) {
    ++fields;
    Set(x);
  }
};
struct Printer {
  std::vector<std::string> out;
  template <typename T>
  void operator()(const char* name, const T& x) {
    if constexpr (std::is_same_v<T, std::string>) {
      out.push_back(std::string(name) + "=" + x);
    } else {
      out.push_back(std::string(name) + "=" + std::to_string(x));
    }
  }
};
std::vector<std::string> Print(const StepFigures& s) {
  Printer p;
  StepFigures::Fields(s, p);
  return p.out;
}
StepFigures Filled(size_t* fields = nullptr) {
  StepFigures s;
  Filler f;
  StepFigures::Fields(s, f);
  if (fields != nullptr) *fields = f.fields;
  return s;
}

TEST(StepSignal, EveryFigureCrossesTheWireByName) {
  size_t fields = 0;
  const StepFigures sent = Filled(&fields);
  EXPECT_EQ(fields, 13u) << "a figure added to StepFigures: add it to its Fields list and to wire::RankSignal";
  wire::RankSignal r;
  CopyToMessage(sent, &r);
  for (const std::string& f : Print(sent)) {
    const std::string name = f.substr(0, f.find('='));
    EXPECT_NE(r.GetDescriptor()->FindFieldByName(name), nullptr) << "wire::RankSignal lacks " << name;
  }
  wire::RankSignal parsed;
  ASSERT_TRUE(parsed.ParseFromString(r.SerializeAsString()));
  StepFigures got;
  CopyFromMessage(parsed, &got);
  EXPECT_EQ(Print(got), Print(sent));
}

TEST(StepSignal, EveryFigureCrossesTheRankLinkLine) {
  rank_client::StepSignal s;
  static_cast<StepFigures&>(s) = Filled();
  s.loss = 3.25;  // the line prints %.9g: exact for these
  s.observed_ms = 1763840000000;
  Result<rank_client::StepSignal> back = rank_client::StepSignal::Parse(s.Format());
  ASSERT_TRUE(back.ok()) << back.status().ToString() << ": " << s.Format();
  EXPECT_EQ(Print(*back), Print(s)) << s.Format();
  EXPECT_EQ(back->observed_ms, s.observed_ms);
}

}  // namespace
}  // namespace bulwark
