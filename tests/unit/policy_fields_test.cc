// The policy's fields by name (controller/policy_fields.h): what `bulwark up
// --policy` and `bulwark sim`'s `policy:` set, and the one-line errors.
#include <gtest/gtest.h>

#include <cmath>

#include "controller/policy_json.h"

namespace bulwark::controller {
namespace {

// A value unlike the default that the field's kind accepts: a flag flips,
// a count or a time gains one, a ratio moves by a third.
double Changed(const PolicyValue& v, bool whole) {
  if (v.name.find("checkup_") == 0 || v.name == "narrow_to_pool" || v.name == "domain_aware_placement") {
    return v.value == 0 ? 1 : 0;
  }
  return whole || *v.unit ? v.value + 1 : v.value * 4 / 3 + 0.01;
}

// Every field of the table reaches its own member and only it: set alone,
// it is the one change, with the value given.
TEST(PolicyFields, EachFieldSetsItsOwnMember) {
  const std::vector<PolicyValue> shipped = PolicyValues(PolicyConfig{});
  ASSERT_GE(shipped.size(), 30u);
  for (const PolicyValue& v : shipped) {
    PolicyConfig p;
    // A count must stay whole: try the whole value first, a ratio's after.
    double to = Changed(v, true);
    if (!SetPolicyField(v.name, to, &p).ok()) {
      to = Changed(v, false);
      ASSERT_TRUE(SetPolicyField(v.name, to, &p).ok()) << v.name;
    }
    const std::vector<PolicyValue> changed = ChangedPolicy(p);
    ASSERT_EQ(changed.size(), 1u) << v.name << ": " << DescribePolicy(changed);
    EXPECT_EQ(changed[0].name, v.name);
    EXPECT_DOUBLE_EQ(changed[0].value, to) << v.name;
  }
}

TEST(PolicyFields, TimesAreSecondsAndReadBackAsSeconds) {
  PolicyConfig p;
  ASSERT_TRUE(SetPolicyField("slow_round", 2.5, &p).ok());
  EXPECT_EQ(p.slow_round, std::chrono::milliseconds(2500));
  ASSERT_TRUE(SetPolicyField("hang_first_step", 90, &p).ok());
  EXPECT_EQ(p.hang_first_step, std::chrono::seconds(90));
  EXPECT_EQ(DescribePolicy(ChangedPolicy(p)), "hang_first_step 90 s, slow_round 2.5 s");
  EXPECT_EQ(DescribePolicy(ChangedPolicy(PolicyConfig{})), "defaults");
}

// The ladder's scalars are fields too, so that a job file can turn on its
// own periodic bitwise check; the ladder's own checks apply.
TEST(PolicyFields, TheLaddersScalarsAreFieldsAndTheLaddersChecksApply) {
  PolicyConfig p;
  ASSERT_TRUE(ApplyPolicyValues({{"ladder_align_every", 600}, {"ladder_settle_steps", 8}}, &p).ok());
  EXPECT_EQ(p.ladder.align_every, std::chrono::minutes(10));
  EXPECT_EQ(p.ladder.settle_steps, 8);
  EXPECT_EQ(DescribePolicy(ChangedPolicy(p)), "ladder_settle_steps 8, ladder_align_every 600 s");
  PolicyConfig q;
  EXPECT_FALSE(ApplyPolicyValues({{"ladder_diagnose_budget", 0}}, &q).ok()) << "LadderConfig::Validate refuses it";
}

TEST(PolicyFields, AMisspeltFieldIsNamedWithTheOneMeant) {
  PolicyConfig p;
  Status s = SetPolicyField("slow_rund", 4, &p);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("unknown field 'slow_rund'; did you mean 'slow_round'?"), std::string::npos)
      << s.message();
  s = SetPolicyField("zzzzzzzzzzzz", 4, &p);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.message().find("did you mean"), std::string::npos) << "no guess that far off: " << s.message();
  EXPECT_TRUE(ChangedPolicy(p).empty()) << "a refused field changes nothing";
}

TEST(PolicyFields, CountsAreWholeFlagsAreOnOrOffAndNumbersFinite) {
  PolicyConfig p;
  Status s = SetPolicyField("slow_rounds", 2.5, &p);
  EXPECT_NE(s.message().find("slow_rounds is a count: give a whole number"), std::string::npos) << s.message();
  s = SetPolicyField("checkup_evicted", 2, &p);
  EXPECT_NE(s.message().find("checkup_evicted is on or off"), std::string::npos) << s.message();
  s = SetPolicyField("slow_ratio", std::nan(""), &p);
  EXPECT_NE(s.message().find("slow_ratio must be a finite number"), std::string::npos) << s.message();
  s = SetPolicyField("slow_round", 1e12, &p);
  EXPECT_NE(s.message().find("too large"), std::string::npos) << s.message();
  EXPECT_TRUE(ChangedPolicy(p).empty());
}

TEST(PolicyFields, AMappingIsSetThenCheckedAsAWhole) {
  PolicyConfig p;
  ASSERT_TRUE(ApplyPolicyJson({{"slow_round", 4}, {"checkup_evicted", false}, {"slow_rounds", 3}}, &p).ok());
  EXPECT_EQ(p.slow_round, std::chrono::seconds(4));
  EXPECT_FALSE(p.checkup_evicted);
  EXPECT_EQ(p.slow_rounds, 3);
  // Each field may be in range alone, and the whole still wrong.
  PolicyConfig q;
  Status s = ApplyPolicyJson({{"slow_rounds", 40}}, &q);
  EXPECT_NE(s.message().find("slow_long_rounds at least slow_rounds"), std::string::npos) << s.message();
  s = ApplyPolicyJson({{"slow_round", "10s"}}, &q);
  EXPECT_NE(s.message().find("slow_round must be a number (times in seconds), got \"10s\""), std::string::npos)
      << s.message();
  s = ApplyPolicyJson(nlohmann::json::array({1, 2}), &q);
  EXPECT_NE(s.message().find("expected a mapping"), std::string::npos) << s.message();
  s = ApplyPolicyJson({{"slow_ratio", 0.9}}, &q);
  EXPECT_NE(s.message().find("slow_ratio, slow_jobwide_ratio and spike_factor must be above 1"), std::string::npos)
      << s.message();
}

}  // namespace
}  // namespace bulwark::controller
