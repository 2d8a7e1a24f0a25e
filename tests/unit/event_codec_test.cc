// Every event kind through the journal's codec and back, every field set:
// the field lists in controller/event.h drive EncodeEvent and DecodeEvent,
// and this test proves each list names every field of its struct.
#include <gtest/gtest.h>

#include <string>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "controller/event.h"
#include "plane/codec.h"

namespace bulwark::plane {
namespace {

// How many members aggregate T has: the most initializers T{...} takes.
// A field added to a struct but not to its Fields list shows as a
// difference between this and the list's length.
struct AnyField {
  template <typename T>
  operator T() const;  // NOLINT: converts to any member type, in unevaluated context only
};
template <typename T, typename Seq, typename = void>
struct Initializable : std::false_type {};
template <typename T, size_t... I>
struct Initializable<T, std::index_sequence<I...>, std::void_t<decltype(T{(void(I), AnyField{})...})>>
    : std::true_type {};
template <typename T, size_t N = 0>
constexpr size_t MemberCount() {
  if constexpr (N > 16 || !Initializable<T, std::make_index_sequence<N + 1>>::value) {
    return N;
  } else {
    return MemberCount<T, N + 1>();
  }
}

// Sets every field to a value no other field has and that is not its
// default, and counts the fields.
struct Filler {
  int n = 0;
  void Set(int& x) { x = ++n; }
  void Set(int64_t& x) { x = 1000 + ++n; }
  void Set(double& x) { x = ++n + 0.25; }
  void Set(bool& x) {
    ++n;
    x = true;
  }
  void Set(std::string& x) { x = "s" + std::to_string(++n); }
  void Set(Time& x) { x = TimeFromMs(100000 + ++n); }
  void Set(Duration& x) { x = Duration(5000 + ++n); }
  void Set(InspectionKind& x) {
    ++n;
    x = InspectionKind::kProcess;
  }
  void Set(std::vector<std::string>& x) { x = {"m" + std::to_string(++n), "m" + std::to_string(++n)}; }
  void Set(std::vector<int>& x) { x = {++n, ++n}; }
  void Set(std::vector<StackGroupSummary>& x) {
    ++n;
    x = {{2, "frame_a", {0, 1}}, {1, "frame_b", {2}}};
  }
  void Set(std::vector<DiagnosticResult>& x) {
    ++n;
    DiagnosticResult r;
    r.test = "gemm";
    r.passed = true;
    r.detail = "fine";
    r.ms = 12.5;
    x = {r};
  }
  size_t fields = 0;
  template <typename T>
  void operator()(const char*, T& x) {
    ++fields;
    Set(x);
  }
  template <typename T>
  void Optional(const char* name, T& x) {
    (*this)(name, x);
  }
};

// Each field as text, by name, without the codec: what the comparison reads.
struct Printer {
  std::vector<std::string> out;
  static std::string Text(const std::string& x) { return x; }
  static std::string Text(bool x) { return x ? "true" : "false"; }
  static std::string Text(Time x) { return std::to_string(ToMs(x)); }
  static std::string Text(Duration x) { return std::to_string(ToMs(x)); }
  static std::string Text(InspectionKind x) { return InspectionKindName(x); }
  static std::string Text(const StackGroupSummary& g) {
    return std::to_string(g.count) + "/" + g.stack + "/" + Text(g.ranks);
  }
  static std::string Text(const DiagnosticResult& r) {
    return r.test + "/" + Text(r.passed) + "/" + r.detail + "/" + std::to_string(r.ms);
  }
  template <typename T>
  static std::string Text(const std::vector<T>& v) {
    std::string s = "[";
    for (const T& x : v) s += Text(x) + ",";
    return s + "]";
  }
  template <typename T>
  static std::string Text(const T& x) {
    static_assert(std::is_arithmetic_v<T>, "give the field's type a Text");
    return std::to_string(x);
  }
  template <typename T>
  void operator()(const char* name, const T& x) {
    out.push_back(std::string(name) + "=" + Text(x));
  }
  template <typename T>
  void Optional(const char* name, const T& x) {
    (*this)(name, x);
  }
};

template <typename T>
std::vector<std::string> Print(const T& x) {
  Printer p;
  T::Fields(x, p);
  return p.out;
}

template <size_t I>
void RoundTrip() {
  using T = std::variant_alternative_t<I, Event>;
  const char* kind = EventKindName(static_cast<EventKind>(I));
  T x;
  Filler f;
  T::Fields(x, f);
  EXPECT_EQ(f.fields, MemberCount<T>()) << kind << ": a member is missing from its Fields list (event.h)";

  const nlohmann::json j = EncodeEvent(Event(std::in_place_index<I>, x));
  EXPECT_EQ(j.size(), f.fields + 1) << kind << ": every field and the kind are written: " << j.dump();
  Result<Event> back = DecodeEvent(nlohmann::json::parse(j.dump()));
  ASSERT_TRUE(back.ok()) << kind << ": " << back.status().ToString() << " in " << j.dump();
  ASSERT_EQ(back->index(), I) << kind;
  EXPECT_EQ(Print(std::get<I>(*back)), Print(x)) << kind;

  // Each required field, dropped, is named in the refusal.
  Printer names;
  T::Fields(x, names);
  for (const std::string& field : names.out) {
    const std::string name = field.substr(0, field.find('='));
    nlohmann::json less = j;
    less.erase(name);
    Result<Event> partial = DecodeEvent(less);
    if (partial.ok()) continue;  // an optional field (older rows lack it)
    EXPECT_NE(partial.status().message().find("'" + name + "'"), std::string::npos)
        << kind << ": " << partial.status().ToString();
  }
}

template <size_t... I>
void RoundTripAll(std::index_sequence<I...>) {
  (RoundTrip<I>(), ...);
}

TEST(EventCodec, EveryKindRoundTripsEveryField) {
  RoundTripAll(std::make_index_sequence<std::variant_size_v<Event>>());
}

TEST(EventCodec, AnUnknownKindIsRefusedByName) {
  Result<Event> e = DecodeEvent(nlohmann::json{{"kind", "meteor_strike"}, {"observed", 1}});
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("meteor_strike"), std::string::npos) << e.status().ToString();
}

}  // namespace
}  // namespace bulwark::plane
