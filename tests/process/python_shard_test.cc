// The Python client (python/bulwark/) and the C++ side of in-memory
// checkpoints agree, without a cluster: images one writes the other reads,
// and a Python rank's saves land in a real agent shard store, reach the
// backup peer and durable storage, and come back when the rank asks.
// Needs BULWARK_TORCH_PYTHON (the clone's .venv, scripts/install-python.sh).
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <thread>

#include "agent/shard_store.h"
#include "rank_client/shard_client.h"
#include "rank_client/shard_image.h"
#include "common/checksum.h"
#include "common/files.h"
#include "support/process.h"

namespace bulwark {
namespace {

// Runs `code` in the Python the tests use, with the package on its path.
testing::ProcessResult Python(const std::string& code, std::map<std::string, std::string> env = {}) {
  env["PYTHONPATH"] = BULWARK_PYTHON_DIR;
  return testing::Run({BULWARK_TORCH_PYTHON, "-c", code}, env, 120);
}

TEST(PythonShards, CppReadsPythonsImagesAndPythonReadsCpps) {
  const std::string dir = testing::MakeTempDir();
  auto py = Python(
      "from bulwark import shard\n"
      "buf = bytearray(1 << 16)\n"
      "shard.write_image(buf, 0, len(buf), shard.ShardInfo(42, 1, 2), b'{\"by\":\"python\"}',\n"
      "                  [('state', bytes(range(256)) * 40), ('rng', b'seed')])\n"
      "open('" + dir + "/py.shard', 'wb').write(buf[:shard.peek_header(buf)[1]])\n");
  ASSERT_EQ(py.exit_code, 0) << py.err;
  auto bytes = ReadFile(dir + "/py.shard");
  ASSERT_TRUE(bytes.ok()) << bytes.status().ToString();
  auto v = rank_client::ReadShardImage(bytes->data(), bytes->size(), "python's image");
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_EQ(v->info.step, 42);
  EXPECT_EQ(v->info.rank, 1);
  EXPECT_EQ(v->info.world_size, 2);
  EXPECT_EQ(v->meta, "{\"by\":\"python\"}");
  ASSERT_EQ(v->sections["state"].second, 256u * 40);
  EXPECT_EQ(v->sections["state"].first[300], 300 % 256);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(v->sections["rng"].first), 4), "seed");
  // Its CRC-32 catches a flipped bit as Checksum64 does.
  std::string bad = *bytes;
  ASSERT_TRUE(rank_client::CorruptShardImage(bad.data(), bad.size()));
  auto c = rank_client::ReadShardImage(bad.data(), bad.size(), "python's image");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("fails its checksum"), std::string::npos) << c.status().ToString();

  // bulwark-train's images (XXH3, and Checksum64 from before) read in Python.
  std::vector<float> params(1000, 1.5f);
  std::vector<uint8_t> slot(1 << 16);
  ASSERT_TRUE(rank_client::WriteShardImage(slot.data(), slot.size(), {7, 0, 2}, "{\"by\":\"c++\"}",
                                      {{"params", params.data(), params.size() * sizeof(float)}})
                  .ok());
  ASSERT_TRUE(WriteFileAtomic(dir + "/cpp.shard", slot.data(), slot.size()).ok());
  // The same image as bulwark-train wrote it before XXH3: payload Checksum64.
  rank_client::ShardHeader h;
  std::memcpy(&h, slot.data(), sizeof h);
  ASSERT_EQ(h.checksum_kind, rank_client::kXxh3);
  h.checksum_kind = rank_client::kChecksum64;
  h.payload_checksum = Checksum64(slot.data() + sizeof h, h.payload_bytes);
  h.header_checksum = Checksum64(&h, offsetof(rank_client::ShardHeader, header_checksum));
  std::memcpy(slot.data(), &h, sizeof h);
  ASSERT_TRUE(WriteFileAtomic(dir + "/cpp0.shard", slot.data(), slot.size()).ok());
  py = Python(
      "import struct\n"
      "from bulwark import shard\n"
      "for name in ('cpp', 'cpp0'):\n"
      "    data = open('" + dir + "/' + name + '.shard', 'rb').read()\n"
      "    info, meta, sections = shard.read_image(data)\n"
      "    print(info.step, info.rank, meta.decode(), struct.unpack_from('<f', sections['params'], 4 * 999)[0])\n"
      "    bad = bytearray(data); bad[500] ^= 1\n"
      "    try:\n"
      "        shard.read_image(bad, where=name)\n"
      "    except shard.CorruptShard as e:\n"
      "        print(e)\n");
  ASSERT_EQ(py.exit_code, 0) << py.err;
  EXPECT_EQ(py.out,
            "7 0 {\"by\":\"c++\"} 1.5\ncpp: shard of step 7 fails its checksum\n"
            "7 0 {\"by\":\"c++\"} 1.5\ncpp0: shard of step 7 fails its checksum\n");
}

bool Eventually(const std::function<bool()>& pred) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (std::chrono::steady_clock::now() < deadline) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return pred();
}

int64_t Holds(agent::ShardStore& s, int rank, bool backup) {
  for (const auto& h : s.Holdings())
    if (h.rank == rank && h.backup == backup) return h.step;
  return -1;
}

// Rank 0 of a 2-rank job on machine a, rank 1 on b (a C++ client, which
// tells b's store the job's world so that it accepts a's pushes).
TEST(PythonShards, APythonRanksSavesReachTheStorePeerAndDiskAndComeBack) {
  const std::string dir = testing::MakeTempDir();
  std::map<std::string, std::unique_ptr<agent::ShardStore>> stores;
  for (const char* m : {"a", "b", "c"}) {
    auto s = agent::ShardStore::Start(m, dir + "/" + m + ".sock", "127.0.0.1", "token", [](const std::string&) {});
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    stores[m] = std::move(*s);
  }
  auto peer = rank_client::ShardClient::Connect(dir + "/b.sock", 1, 2);
  ASSERT_TRUE(peer.ok());
  ASSERT_TRUE((*peer)->OpenRegion(1 << 20).ok());
  agent::ShardRoutes routes;
  routes.backup_machine = "b";
  routes.backup_addr = stores["b"]->addr();
  routes.durable_dir = dir + "/durable";
  routes.persist_every = 2;
  stores["a"]->SetRoutes(routes, {0});

  auto py = Python(
      "import os, torch\n"
      "from bulwark.memory_checkpoint import MemoryCheckpoint\n"
      "m = MemoryCheckpoint(os.environ['BULWARK_SHARD_SOCKET'], 0, 2, note=lambda s: None)\n"
      "for step in range(1, 6):\n"
      "    m.save(step, {'w': torch.full((1000,), float(step))})\n"
      "m._wait_released(range(m._region.slots))\n",  // the agent sent and persisted everything
      {{"BULWARK_SHARD_SOCKET", dir + "/a.sock"}});
  ASSERT_EQ(py.exit_code, 0) << py.err;
  // The rank is gone; its machine's memory keeps its images.
  EXPECT_EQ(Holds(*stores["a"], 0, false), 5);
  EXPECT_TRUE(Eventually([&] { return Holds(*stores["b"], 0, true) == 5; })) << "the backup never reached b";
  EXPECT_EQ(rank_client::DurableSteps(dir + "/durable", 0), (std::vector<int64_t>{4, 2}));

  // Restarted in place on a: memory (newest first), the peer's, durable.
  // On c, a standby, a's memory is gone: the backup fetched from b.
  const std::string list =
      "import os\n"
      "from bulwark.memory_checkpoint import MemoryCheckpoint\n"
      "m = MemoryCheckpoint(os.environ['BULWARK_SHARD_SOCKET'], 0, 2, note=lambda s: None)\n"
      "copies, regions = m._copies()\n"
      "good, points = m._verify(copies, durable=False)\n"
      "print(' '.join('%s:%d' % (c.source, c.info.step) for c in copies))\n"
      "print(points[0])\n";
  stores["a"]->SetRoutes({"b", stores["b"]->addr(), {{0, "b", stores["b"]->addr()}}, dir + "/durable", 2}, {0});
  py = Python(list, {{"BULWARK_SHARD_SOCKET", dir + "/a.sock"}});
  ASSERT_EQ(py.exit_code, 0) << py.err;
  EXPECT_EQ(py.out.substr(0, py.out.find('\n')).rfind("memory:5 memory:4 memory:3 peer:b:5", 0), 0u) << py.out;
  EXPECT_NE(py.out.find("durable:4 durable:2"), std::string::npos) << py.out;
  EXPECT_NE(py.out.find("(5, 0)"), std::string::npos) << py.out;

  stores["c"]->SetRoutes({"", "", {{0, "b", stores["b"]->addr()}}, "", 0}, {0});
  py = Python(list, {{"BULWARK_SHARD_SOCKET", dir + "/c.sock"}});
  ASSERT_EQ(py.exit_code, 0) << py.err;
  EXPECT_EQ(py.out.rfind("peer:b:5", 0), 0u) << py.out;
  EXPECT_NE(py.out.find("(5, 0)"), std::string::npos) << py.out;
}

}  // namespace
}  // namespace bulwark
