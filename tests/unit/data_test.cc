// Configuration, data pipeline and the checkpoint directory protocol: all
// without libtorch.
#include <gtest/gtest.h>
#include <sentencepiece_processor.h>

#include <fstream>
#include <set>

#include "common/files.h"
#include "common/record_file.h"
#include "support/process.h"
#include "trainer/state/checkpoint_dir.h"
#include "trainer/config.h"
#include "trainer/data/prepare.h"
#include "trainer/data/sampler.h"
#include "trainer/data/tokens.h"

namespace bulwark::trainer {
namespace {

// ---------------------------------------------------------------- config

TEST(Config, FlagsOverridePreset) {
  auto c = ParseTrainArgs({"--batch-size", "3", "--config", "tiny", "--lr=0.5", "--resume"});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->model.d_model, 64);  // from tiny, wherever --config stood
  EXPECT_EQ(c->batch_size, 3);
  EXPECT_DOUBLE_EQ(c->lr, 0.5);
  EXPECT_TRUE(c->resume);
}

TEST(Config, UnknownFlagIsRefusedWithSuggestion) {
  auto c = ParseTrainArgs({"--batch-sise", "3"});
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), Status::Code::kInvalidArgument);
  EXPECT_NE(c.status().message().find("unknown flag '--batch-sise'"), std::string::npos) << c.status().message();
  EXPECT_NE(c.status().message().find("did you mean '--batch-size'"), std::string::npos);
}

TEST(Config, BadValuesNameTheFlag) {
  auto c = ParseTrainArgs({"--steps", "many"});
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("--steps 'many' is not an integer"), std::string::npos);
  EXPECT_FALSE(ParseTrainArgs({"--steps"}).ok());
  EXPECT_FALSE(ParseTrainArgs({"--config", "huge"}).ok());
  auto v = ParseTrainArgs({"--n-heads", "3"});
  ASSERT_TRUE(v.ok());
  EXPECT_NE(v->Validate().message().find("not divisible"), std::string::npos);
}

TEST(Config, FileKeysAndUnknownKeyWithLineNumber) {
  std::string dir = testing::MakeTempDir();
  std::string good = JoinPath(dir, "good.conf"), bad = JoinPath(dir, "bad.conf");
  EXPECT_TRUE(WriteFileAtomic(good, std::string("# a model\nd_model = 128\nn-layers = 2\n\nsteps = 7  # short\n")).ok());
  EXPECT_TRUE(WriteFileAtomic(bad, std::string("steps = 7\nlearning_rate = 3\n")).ok());
  auto c = ParseTrainArgs({"--config", good, "--steps", "9"});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->model.d_model, 128);
  EXPECT_EQ(c->model.n_layers, 2);
  EXPECT_EQ(c->steps, 9);
  auto b = ParseTrainArgs({"--config", bad});
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.status().message().find("bad.conf:2"), std::string::npos) << b.status().message();
  EXPECT_NE(b.status().message().find("learning-rate"), std::string::npos);
  RemoveTree(dir).IgnoreError();  // a temporary directory
}

TEST(Config, FlagsOverrideAConfigFileWhereverItStands) {
  std::string dir = testing::MakeTempDir();
  std::string file = JoinPath(dir, "run.conf");
  EXPECT_TRUE(WriteFileAtomic(file, std::string("steps = 7\nresume = true\nlr = 0.25\n")).ok());
  auto c = ParseTrainArgs({"--steps", "11", "--resume=false", "--config", file, "--batch_size=5"});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->steps, 11);         // the flag, though the file came later
  EXPECT_FALSE(c->resume);         // a boolean flag with an explicit value
  EXPECT_DOUBLE_EQ(c->lr, 0.25);   // the file where no flag says otherwise
  EXPECT_EQ(c->batch_size, 5);     // '_' for '-'
  auto last = ParseTrainArgs({"--steps", "3", "--steps=4"});
  ASSERT_TRUE(last.ok()) << last.status().ToString();
  EXPECT_EQ(last->steps, 4);  // a repeated flag: the last wins
  auto empty = ParseTrainArgs({"--ckpt-dir=", "--steps", "6"});
  ASSERT_TRUE(empty.ok()) << empty.status().ToString();
  EXPECT_EQ(empty->ckpt_dir, "");  // "=" and nothing: empty, not the next word
  EXPECT_EQ(empty->steps, 6);
  RemoveTree(dir).IgnoreError();  // a temporary directory
}

TEST(Config, BooleanFlagsTakeNoValueAndRefuseABadOne) {
  auto c = ParseTrainArgs({"--shard-optimizer", "--steps", "2"});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_TRUE(c->shard_optimizer);
  EXPECT_EQ(c->steps, 2);
  auto bad = ParseTrainArgs({"--resume=maybe"});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("--resume 'maybe' is not true or false"), std::string::npos)
      << bad.status().message();
  auto stray = ParseTrainArgs({"--resume", "false"});  // a boolean flag does not take the next word
  ASSERT_FALSE(stray.ok());
  EXPECT_NE(stray.status().message().find("unexpected argument 'false'"), std::string::npos)
      << stray.status().message();
}

TEST(Config, MissingValueAndUnknownFlagAreOneLine) {
  auto missing = ParseTrainArgs({"--lr"});
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().message(), "flag --lr needs a value");
  auto unknown = ParseTrainArgs({"--poet-neuman-terms=3"});
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find("did you mean '--poet-neumann-terms'"), std::string::npos)
      << unknown.status().message();
  EXPECT_EQ(unknown.status().message().find('\n'), std::string::npos);
}

// --help lists every key with room between its name and its help (the
// long names once ran into their help text) and the value it would take.
TEST(Config, HelpListsEveryKeySeparatedFromItsHelp) {
  auto tiny = ParseTrainArgs({"--config", "tiny"});
  ASSERT_TRUE(tiny.ok());
  const std::string help = UsageText(*tiny);
  for (const char* key : {"--poet-neumann-terms", "--allow-fresh-start", "--poet-fs-fraction", "--shard-optimizer",
                          "--steps", "--config", "--resume", "--d-model"}) {
    const size_t at = help.find(std::string(key) + " ");
    const size_t at_eol = help.find(std::string(key) + "\n");
    EXPECT_TRUE(at != std::string::npos || at_eol != std::string::npos) << key << " not followed by space:\n" << help;
  }
  EXPECT_EQ(help.find("--poet-neumann-termsCayley"), std::string::npos) << help;
  EXPECT_NE(help.find("Cayley-Neumann terms k (>= 1)"), std::string::npos) << help;
  EXPECT_NE(help.find("model width [64]"), std::string::npos) << "tiny's d-model as the default:\n" << help;
  EXPECT_NE(help.find("bulwark-train prepare"), std::string::npos) << help;
}

// ---------------------------------------------------------------- sampler

TEST(Sampler, EachEpochVisitsEverySampleOnceInASeededOrder) {
  Sampler s(1001, 10, 7);  // 100 samples
  ASSERT_EQ(s.num_samples(), 100u);
  std::set<uint64_t> epoch0, epoch1;
  std::vector<uint64_t> order0;
  for (uint64_t p = 0; p < 100; ++p) order0.push_back(s.SampleStart(p)), epoch0.insert(order0.back());
  for (uint64_t p = 100; p < 200; ++p) epoch1.insert(s.SampleStart(p));
  EXPECT_EQ(epoch0.size(), 100u);
  EXPECT_EQ(epoch1.size(), 100u);
  Sampler again(1001, 10, 7), other(1001, 10, 8);
  int same = 0;
  for (uint64_t p = 0; p < 100; ++p) {
    EXPECT_EQ(again.SampleStart(p), order0[p]);
    same += other.SampleStart(p) == order0[p];
  }
  EXPECT_LT(same, 10);
  EXPECT_NE(s.SampleStart(100), order0[0]);  // a new epoch draws a new order (almost surely)
}

// ---------------------------------------------------------------- data

class PreparedData : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(testing::MakeTempDir());
    std::string corpus = JoinPath(*dir_, "corpus.txt");
    std::string text;
    for (int i = 0; i < 2000; ++i) {
      text += "line " + std::to_string(i) + ": the quick brown fox jumps over the lazy dog, ";
      text += (i % 3 ? "and then it rests.\n" : "and é ü ñ stay UTF-8.\n");
    }
    EXPECT_TRUE(WriteFileAtomic(corpus, text).ok());
    PrepareOptions o;
    o.corpus = corpus;
    o.out = JoinPath(*dir_, "data");
    o.vocab_size = 400;
    o.quiet = true;
    status_ = new Status(Prepare(o));
  }
  static std::string* dir_;
  static Status* status_;
};
std::string* PreparedData::dir_;
Status* PreparedData::status_;

TEST_F(PreparedData, WritesTokenizerAndVerifiedShards) {
  ASSERT_TRUE(status_->ok()) << status_->ToString();
  auto ds = LoadDataSet(JoinPath(*dir_, "data"));
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  EXPECT_EQ(ds->vocab_size, 400);
  EXPECT_GT(ds->train.size(), 10 * ds->val.size());
  EXPECT_GT(ds->val.size(), 0u);
  for (const std::string& name : ListDir(JoinPath(*dir_, "data"))) {
    EXPECT_EQ(name.find("tmp"), std::string::npos) << "left behind: " << name;
    EXPECT_EQ(name.find("tokenizer-input"), std::string::npos) << "left behind: " << name;
  }
}

TEST_F(PreparedData, TokenizerRoundTripsText) {
  ASSERT_TRUE(status_->ok());
  sentencepiece::SentencePieceProcessor sp;
  ASSERT_TRUE(sp.Load(JoinPath(*dir_, "data/tokenizer.model")).ok());
  for (std::string s : {"the quick brown fox", "and é ü ñ stay UTF-8.", "unseen: zebra 12345 ☃"}) {
    std::vector<int> ids;
    ASSERT_TRUE(sp.Encode(s, &ids).ok());
    std::string back;
    ASSERT_TRUE(sp.Decode(ids, &back).ok());
    EXPECT_EQ(back, s);
  }
}

TEST_F(PreparedData, ShardFromAnotherTokenizerIsRefused) {
  ASSERT_TRUE(status_->ok());
  std::string copy = JoinPath(*dir_, "mixed");
  ASSERT_EQ(std::system(("cp -r " + JoinPath(*dir_, "data") + " " + copy).c_str()), 0);
  TokenShardMeta meta{400, "0123456789abcdef", 0};
  ASSERT_TRUE(WriteTokenShard(JoinPath(copy, "train-999.bin"), meta, {1, 2, 3}).ok());
  auto ds = LoadDataSet(copy);
  ASSERT_FALSE(ds.ok());
  EXPECT_EQ(ds.status().code(), Status::Code::kInvalidArgument);
  EXPECT_NE(ds.status().message().find("train-999.bin was made by another tokenizer"), std::string::npos)
      << ds.status().message();
}

TEST_F(PreparedData, ExistingOutputIsNotOverwrittenWithoutForce) {
  ASSERT_TRUE(status_->ok());
  PrepareOptions o;
  o.corpus = JoinPath(*dir_, "corpus.txt");
  o.out = JoinPath(*dir_, "data");
  Status s = Prepare(o);
  EXPECT_EQ(s.code(), Status::Code::kFailedPrecondition);
  EXPECT_NE(s.message().find("--force"), std::string::npos);
}

TEST(Prepare, MissingCorpusFailsAndLeavesNothing) {
  std::string dir = testing::MakeTempDir();
  PrepareOptions o;
  o.corpus = JoinPath(dir, "no-such-file.txt");
  o.out = JoinPath(dir, "out");
  Status s = Prepare(o);
  EXPECT_EQ(s.code(), Status::Code::kNotFound);
  EXPECT_NE(s.message().find("no-such-file.txt"), std::string::npos);
  EXPECT_TRUE(ListDir(dir).empty()) << "left behind: " << ListDir(dir)[0];
  RemoveTree(dir).IgnoreError();  // a temporary directory
}

TEST(Prepare, RejectsBadFlags) {
  EXPECT_FALSE(ParsePrepareArgs({"--corpus", "kjv"}).ok());  // no --out
  EXPECT_FALSE(ParsePrepareArgs({"--out", "x", "--vocab-size", "12"}).ok());
  EXPECT_FALSE(ParsePrepareArgs({"--out", "x", "--colour"}).ok());
}

// ---------------------------------------------------------------- checkpoint directory

class CheckpointDir : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = testing::MakeTempDir(); }
  void TearDown() override { RemoveTree(dir_).IgnoreError(); }  // a temporary directory
  // A complete checkpoint at `step` with one shard whose payload is `tag`.
  void Save(int64_t step, const std::string& tag, bool complete = true) {
    std::string d = JoinPath(dir_, StepDirName(step));
    ASSERT_TRUE(MakeDirs(d).ok());
    RecordWriter w("ckpt");
    w.Add("tag", tag);
    ASSERT_TRUE(w.WriteAtomic(JoinPath(d, ShardFileName(0))).ok());
    if (complete) {
      ASSERT_TRUE(WriteCompleteMarker(d, step, 1, {ShardFileName(0)}).ok());
    }
  }
  std::string dir_;
  std::vector<std::string> skipped_;
  std::optional<FoundCheckpoint> Find() {
    return FindNewestValid(dir_, [&](const std::string& d, const Status& s) { skipped_.push_back(d + ": " + s.message()); });
  }
};

TEST_F(CheckpointDir, PicksNewestComplete) {
  Save(10, "a");
  Save(20, "b");
  auto f = Find();
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->step, 20);
  EXPECT_EQ(*f->shards[0].Get("tag"), "b");
  EXPECT_TRUE(skipped_.empty());
}

TEST_F(CheckpointDir, SkipsIncompleteAndCorruptAndReportsWhy) {
  Save(10, "a");
  Save(20, "b");
  Save(30, "c", /*complete=*/false);
  // Flip a byte in the middle of step 20's shard, as bit rot would.
  std::string shard = JoinPath(dir_, StepDirName(20) + "/" + ShardFileName(0));
  std::string bytes = *ReadFile(shard);
  bytes[bytes.size() - 2] ^= 0x55;
  ASSERT_TRUE(WriteFileAtomic(shard, bytes).ok());
  auto f = Find();
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->step, 10);
  ASSERT_EQ(skipped_.size(), 2u);
  EXPECT_NE(skipped_[0].find("incomplete"), std::string::npos) << skipped_[0];
  EXPECT_NE(skipped_[1].find("checksum mismatch"), std::string::npos) << skipped_[1];
}

TEST_F(CheckpointDir, TornShardIsSkipped) {
  Save(10, "a");
  Save(20, std::string(1000, 'b'));
  std::string shard = JoinPath(dir_, StepDirName(20) + "/" + ShardFileName(0));
  std::string bytes = *ReadFile(shard);
  ASSERT_TRUE(WriteFileAtomic(shard, bytes.substr(0, bytes.size() / 2)).ok());
  auto f = Find();
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->step, 10);
  EXPECT_NE(skipped_.at(0).find("torn"), std::string::npos) << skipped_[0];
}

TEST_F(CheckpointDir, NoneValidIsNotAnError) {
  Save(5, "x", false);
  EXPECT_FALSE(Find().has_value());
}

TEST_F(CheckpointDir, PruneKeepsNewestAndDropsDeadSaves) {
  Save(10, "a");
  Save(15, "dead", false);
  Save(20, "b");
  Save(30, "c");
  Save(40, "in progress", false);
  ASSERT_TRUE(PruneCheckpoints(dir_, 2).ok());
  EXPECT_EQ(ListDir(dir_), (std::vector<std::string>{StepDirName(20), StepDirName(30), StepDirName(40)}));
}

// A rollback (a drifting machine found): the newest valid step at or below
// the cap, the later ones passed over unread, then removed, so that no
// later resume or pruning takes them for the newest.
TEST_F(CheckpointDir, ARollbackPassesOverLaterStepsAndRemovesThem) {
  Save(10, "a");
  Save(20, "b");
  Save(30, "drifted");
  auto f = FindNewestValid(dir_, [&](const std::string& d, const Status& s) { skipped_.push_back(d); }, 25);
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->step, 20);
  EXPECT_TRUE(skipped_.empty()) << "a step above the cap is not a rejected checkpoint";
  EXPECT_FALSE(FindNewestValid(dir_, [](const std::string&, const Status&) {}, 5).has_value()) << "from the start";
  ASSERT_TRUE(RemoveCheckpointsAfter(dir_, 20).ok());
  EXPECT_EQ(ListDir(dir_), (std::vector<std::string>{StepDirName(10), StepDirName(20)}));
}

}  // namespace
}  // namespace bulwark::trainer
