// Whose lateness a healthy machine's loss for silence was (issue 36): the
// generator's, which did not send the report that was due (the agent really
// was silent), or the controller's, which did not hear a report that was
// sent, or answered the last one too late for the next to be due before the
// lease ran out (an agent sends its next report only once answered). Judged
// from the generator's own record of each agent's reports, against the
// silence the controller's log line names. A pure function: no clock.
#pragma once

#include <cstdint>
#include <vector>

namespace plane_bench {

struct Send {
  int64_t sent_ms = 0;
  int64_t answered_ms = 0;  // 0: not answered (yet)
};

enum class Blame { kGenerator, kUnheard, kAnswerLate };

inline const char* BlameName(Blame b) {
  switch (b) {
    case Blame::kGenerator: return "generator late";
    case Blame::kUnheard: return "sent, not heard";
    case Blame::kAnswerLate: return "answer late";
  }
  return "?";
}

// `sends` in the order sent; the machine lost at `lost_ms` after `silent_ms`
// of silence as the controller counted it; one report due every `period_ms`
// once the last is answered, `slack_ms` allowed for the schedule's slots.
inline Blame BlameFor(const std::vector<Send>& sends, int64_t lost_ms, int64_t silent_ms, int64_t period_ms = 1000,
                      int64_t slack_ms = 100) {
  const int64_t since = lost_ms - silent_ms;  // when the controller last heard it
  const Send* last = nullptr;                 // the last report sent by then
  for (const Send& s : sends) {
    if (s.sent_ms > since && s.sent_ms <= lost_ms) return Blame::kUnheard;
    if (s.sent_ms <= since) last = &s;
  }
  if (last == nullptr || last->answered_ms == 0 || last->answered_ms > lost_ms) return Blame::kAnswerLate;
  return last->answered_ms + period_ms + slack_ms < lost_ms ? Blame::kGenerator : Blame::kAnswerLate;
}

}  // namespace plane_bench
