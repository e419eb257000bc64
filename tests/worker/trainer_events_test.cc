// The trainer's stdout contract (worker/trainer_events.h): every line written by ToLine
// parses back to the same event; anything else is not an event; the exit record's code
// survives the round trip for every canonical code.
#include "worker/trainer_events.h"

#include <gtest/gtest.h>

namespace llamafleet::trainer_events {
namespace {

template <typename T>
T RoundTrip(const T& e) {
  std::optional<Event> parsed = ParseLine(ToLine(e));
  EXPECT_TRUE(parsed.has_value()) << ToLine(e);
  EXPECT_TRUE(parsed.has_value() && std::holds_alternative<T>(*parsed)) << ToLine(e);
  return parsed.has_value() && std::holds_alternative<T>(*parsed) ? std::get<T>(*parsed) : T{};
}

TEST(TrainerEventsTest, EveryEventRoundTrips) {
  Started s = RoundTrip(Started{4, 1234567, 24, 6, 48, 32});
  EXPECT_EQ(s.world_size, 4);
  EXPECT_EQ(s.parameters, 1234567);
  EXPECT_EQ(s.total_steps, 24);
  EXPECT_EQ(s.steps_per_epoch, 6);
  EXPECT_EQ(s.train_rows, 48);
  EXPECT_EQ(s.seq_len, 32);

  Metrics m;
  m.step = 10;
  m.epoch = 1;
  m.loss = 2.718281828459045;
  m.lr = 3e-4;
  m.grad_norm = 0.5;
  m.tokens = 1 << 20;
  m.tokens_per_s = 123.25;
  m.tflops = 1.5;
  m.peak_mem_bytes = int64_t{80} << 30;
  Metrics mm = RoundTrip(m);
  EXPECT_EQ(mm.step, 10);
  EXPECT_EQ(mm.loss, m.loss);  // exact: the double survives the JSON text
  EXPECT_EQ(mm.tokens, m.tokens);
  EXPECT_EQ(mm.peak_mem_bytes, m.peak_mem_bytes);
  EXPECT_FALSE(mm.mfu.has_value());
  EXPECT_NE(ToLine(m).find("\"mfu\":null"), std::string::npos);
  m.mfu = 0.41;
  EXPECT_EQ(RoundTrip(m).mfu, 0.41);

  Resumed r = RoundTrip(Resumed{"/ck/step-4", 4, {{"/ck/step-8", "sha256 differs"}}});
  EXPECT_EQ(r.path, "/ck/step-4");
  EXPECT_EQ(r.step, 4);
  ASSERT_EQ(r.skipped.size(), 1u);
  EXPECT_EQ(r.skipped[0].path, "/ck/step-8");
  EXPECT_EQ(r.skipped[0].reason, "sha256 differs");

  CheckpointSaved c = RoundTrip(CheckpointSaved{"/ck/step-8", 8, 4096, "ab12", 1.25, std::nullopt});
  EXPECT_EQ(c.path, "/ck/step-8");
  EXPECT_EQ(c.step, 8);
  EXPECT_EQ(c.bytes, 4096);
  EXPECT_EQ(c.manifest_sha256, "ab12");
  EXPECT_EQ(c.loss, 1.25);
  EXPECT_FALSE(c.eval_loss.has_value());
  CheckpointSaved ce{"/ck/step-8", 8, 4096, "ab12", 1.25, std::nullopt};
  ce.eval_loss = 2.5;
  EXPECT_EQ(RoundTrip(ce).eval_loss, 2.5);

  StoppedEarly se = RoundTrip(StoppedEarly{30, 10, 2.25, "stopped early at step 30: eval loss did not improve"});
  EXPECT_EQ(se.step, 30);
  EXPECT_EQ(se.best_step, 10);
  EXPECT_EQ(se.best_loss, 2.25);
  EXPECT_EQ(se.reason, "stopped early at step 30: eval loss did not improve");

  EXPECT_EQ(RoundTrip(Preempted{7, 0.5}).step, 7);
  Eval ev = RoundTrip(Eval{24, 1.5, 4.48, 999});
  EXPECT_EQ(ev.tokens, 999);
  EXPECT_EQ(ev.perplexity, 4.48);
  EXPECT_EQ(ev.set, "");
  // data.eval_path's line keeps its keys; a named set's says which set it is.
  EXPECT_EQ(ToLine(Eval{24, 1.5, 4.48, 999}).find("\"set\""), std::string::npos);
  EXPECT_EQ(RoundTrip(Eval{24, 1.5, 4.48, 999, "code-v2"}).set, "code-v2");
  EXPECT_EQ(RoundTrip(Eval{24, 1.5, 4.48, 999, std::string(100, 'x')}).set.size(), 64u);
  Finished f = RoundTrip(Finished{24, 1.5, "/out"});
  EXPECT_EQ(f.export_dir, "/out");
}

TEST(TrainerEventsTest, TokenizingProgressRoundTrips) {
  Tokenizing t = RoundTrip(Tokenizing{"/fsx/data/train.jsonl", 1'300'000'000, 3'100'000'000});
  EXPECT_EQ(t.path, "/fsx/data/train.jsonl");
  EXPECT_EQ(t.done_bytes, 1'300'000'000);
  EXPECT_EQ(t.total_bytes, 3'100'000'000);
  // A path that is not UTF-8 still makes a line (bytes replaced), never an exception.
  EXPECT_TRUE(ParseLine(ToLine(Tokenizing{"/d/\xff.jsonl", 1, 2})).has_value());
}

TEST(TrainerEventsTest, ProgressRoundTrips) {
  Progress p = RoundTrip(Progress{40, 1234, true, 12.5, 3.25});
  EXPECT_EQ(p.step, 40);
  EXPECT_EQ(p.collectives, 1234);
  EXPECT_TRUE(p.in_collective);
  EXPECT_EQ(p.busy_s, 12.5);
  EXPECT_EQ(p.wait_s, 3.25);
  EXPECT_FALSE(RoundTrip(Progress{}).in_collective);
  // Mistyped fields read as their defaults; the line is still a progress line.
  std::optional<Event> e = ParseLine(R"({"type":"progress","step":"x","in_collective":1,"busy_s":null})");
  ASSERT_TRUE(e.has_value() && std::holds_alternative<Progress>(*e));
  EXPECT_EQ(std::get<Progress>(*e).step, 0);
  EXPECT_FALSE(std::get<Progress>(*e).in_collective);
}

TEST(TrainerEventsTest, SampleRoundTripsAndHostileTextStaysBounded) {
  Sample in{40, 2, "Q: 2+2?", "4\xff", 3, "eos", "4", {{"exact_match", 1.0}, {"contains", 1.0}}};
  auto parsed = ParseLine(ToLine(in));
  ASSERT_TRUE(parsed.has_value());
  const auto* s = std::get_if<Sample>(&*parsed);
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->step, 40);
  EXPECT_EQ(s->index, 2);
  EXPECT_EQ(s->prompt, "Q: 2+2?");
  EXPECT_EQ(s->text, "4\xef\xbf\xbd");  // the invalid byte replaced, not thrown on
  EXPECT_EQ(s->stop_reason, "eos");
  EXPECT_EQ(s->reference, "4");
  ASSERT_EQ(s->scores.size(), 2u);

  // 40 KiB of two-byte characters and 100 scores: cut to the bounds, on a character edge.
  std::string big;
  for (int i = 0; i < 20 << 10; ++i) big += "\xc3\xa9";
  Sample huge{1, 0, big, big, 1, "length", big, {}};
  for (int i = 0; i < 100; ++i) huge.scores.emplace_back("s" + std::to_string(i), i);
  auto cut = ParseLine(ToLine(huge));
  ASSERT_TRUE(cut.has_value());
  const Sample& c = std::get<Sample>(*cut);
  EXPECT_LE(c.text.size(), kSampleTextBytes);
  EXPECT_EQ(c.text.size() % 2, 0u);
  EXPECT_LE(c.prompt.size(), kSampleTextBytes);
  EXPECT_LE(c.reference.size(), kSampleTextBytes);
  EXPECT_EQ(c.scores.size(), kMaxSampleScores);
}

TEST(TrainerEventsTest, ExitRecordKeepsEveryCanonicalCode) {
  for (int c = 0; c <= 16; ++c) {
    const auto code = static_cast<absl::StatusCode>(c);
    Exit e = RoundTrip(Exit{code, "why"});
    EXPECT_EQ(e.code, code) << c;
    EXPECT_EQ(e.message, "why");
  }
  Exit from = Exit::From(absl::InvalidArgumentError("data.train_path: no such file"));
  EXPECT_EQ(ToLine(from),
            "{\"code\":\"INVALID_ARGUMENT\",\"event\":\"exit\",\"message\":\"data.train_path: no such "
            "file\",\"type\":\"event\"}");
  // Bytes that are not UTF-8 (a path, an OS message) do not break the line.
  Exit bad = RoundTrip(Exit{absl::StatusCode::kNotFound, "no file \xff\xfe"});
  EXPECT_EQ(bad.code, absl::StatusCode::kNotFound);
}

TEST(TrainerEventsTest, OlderErrorEventReadsAsExitRecord) {
  std::optional<Event> e = ParseLine(
      "{\"type\":\"event\",\"event\":\"error\",\"message\":\"bad\",\"code\":\"FAILED_PRECONDITION\"}");
  ASSERT_TRUE(e.has_value() && std::holds_alternative<Exit>(*e));
  EXPECT_EQ(std::get<Exit>(*e).code, absl::StatusCode::kFailedPrecondition);
  e = ParseLine("{\"type\":\"event\",\"event\":\"exit\",\"code\":\"NO_SUCH_CODE\",\"message\":\"m\"}");
  ASSERT_TRUE(e.has_value() && std::holds_alternative<Exit>(*e));
  EXPECT_EQ(std::get<Exit>(*e).code, absl::StatusCode::kUnknown);
}

TEST(TrainerEventsTest, OtherLinesAreNotEvents) {
  for (const char* line : {"", "step 3/24 loss 2.5", "{", "{\"type\":\"event\",\"event\":\"exi",
                           "[1,2]", "{\"loss\": 1.5, \"tokens\": 3}", "{\"type\":\"event\",\"event\":\"other\"}",
                           "{\"type\":7}", " {\"type\":\"metrics\"}"}) {
    EXPECT_FALSE(ParseLine(line).has_value()) << line;
  }
  // Mistyped fields read as defaults rather than throwing.
  std::optional<Event> e = ParseLine("{\"type\":\"metrics\",\"step\":\"ten\",\"loss\":null,\"mfu\":\"x\"}");
  ASSERT_TRUE(e.has_value() && std::holds_alternative<Metrics>(*e));
  EXPECT_EQ(std::get<Metrics>(*e).step, 0);
  EXPECT_FALSE(std::get<Metrics>(*e).mfu.has_value());
}

TEST(TrainerEventsTest, ResumeCandidatesRoundTripAndBadFilesNameTheEntry) {
  std::vector<ResumeCandidate> in = {{"/ck/step-8", 8, "aa"}, {"/ck/step-4", 4, "bb"}};
  absl::StatusOr<std::vector<ResumeCandidate>> out = ParseCandidates(CandidatesToJson(in));
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->size(), 2u);
  EXPECT_EQ((*out)[0].path, "/ck/step-8");
  EXPECT_EQ((*out)[0].step, 8);
  EXPECT_EQ((*out)[1].manifest_sha256, "bb");
  EXPECT_TRUE(ParseCandidates("[]").ok());
  EXPECT_EQ(ParseCandidates("{}").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseCandidates("not json").status().code(), absl::StatusCode::kInvalidArgument);
  absl::Status s = ParseCandidates("[{\"path\":\"/a\"},{\"step\":3}]").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("candidates[1]"), std::string::npos) << s;
}

}  // namespace
}  // namespace llamafleet::trainer_events
