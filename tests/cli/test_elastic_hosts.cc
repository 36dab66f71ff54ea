// The elastic loop's pure parts (launcher/elastic_hosts.h): the discovery script's output,
// Horovod's blacklist and cooldown, the hosts each attempt gets, the failed hosts read from
// mpirun's and ranktime's messages, and each attempt's trace name.
#include "elastic_hosts.h"

#include <gtest/gtest.h>

namespace ranktime::cli {
namespace {

TEST(ElasticHosts, ParsesHorovodsDiscoveryFormat) {
  const auto hosts = parse_discovered_hosts("h0:2\n\n  h1 \nnode-3.example.com:4\r\n", 1);
  ASSERT_EQ(hosts.size(), 3u);
  EXPECT_EQ(hosts[0].name, "h0");
  EXPECT_EQ(hosts[0].slots, 2);
  EXPECT_EQ(hosts[1].name, "h1");
  EXPECT_EQ(hosts[1].slots, 1);  // the default slots
  EXPECT_EQ(hosts[2].name, "node-3.example.com");
  EXPECT_EQ(hosts[2].slots, 4);
  EXPECT_EQ(parse_discovered_hosts("h1\n", 8)[0].slots, 8);
}

TEST(ElasticHosts, BadLinesAreErrorsNamingTheLine) {
  for (const auto& [output, expected] : std::vector<std::pair<std::string, std::string>>{
           {"h0:1\nh1:0\n", "line 2 'h1:0': expected HOST or HOST:SLOTS with SLOTS >= 1"},
           {"h0:x\n", "line 1 'h0:x': expected HOST"},
           {"h0:\n", "line 1 'h0:': expected HOST"},
           {"<script>:1\n", "line 1 '<script>:1': not a host name"},
           {"-oProxyCommand=x\n", "not a host name"},
           {"h0 h1\n", "line 1 'h0 h1': not a host name"},
           {"h\x1b[31m\n", "line 1 'h\\x1b[31m': not a host name"},
           {"h0:1\nh0:2\n", "line 2 'h0:2': host named twice"},
       }) {
    try {
      parse_discovered_hosts(output, 1);
      ADD_FAILURE() << "accepted " << output;
    } catch (const DiscoveryError& e) {
      EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
    }
  }
}

TEST(ElasticHosts, WithoutACooldownAFailedHostIsLeftOutForGood) {
  HostBlacklist blacklist(std::nullopt);
  blacklist.add("h2", 100, 0.5);
  EXPECT_TRUE(blacklist.excludes("h2", 1e9));
  EXPECT_FALSE(blacklist.excludes("h1", 100));
  EXPECT_EQ(blacklist.excluded(1e9), std::vector<std::string>{"h2"});
}

TEST(ElasticHosts, CooldownDoublesWithEachFailureWithinTheRange) {
  // Horovod: clamp(MIN * 2^n + u * MIN, MIN, MAX) after the n-th failure.
  HostBlacklist blacklist(std::pair(1.0, 100.0));
  blacklist.add("h2", 0, 0.0);  // 2 s
  EXPECT_TRUE(blacklist.excludes("h2", 1.9));
  EXPECT_FALSE(blacklist.excludes("h2", 2.1));
  blacklist.add("h2", 10, 0.5);  // 4.5 s
  EXPECT_TRUE(blacklist.excludes("h2", 14.4));
  EXPECT_FALSE(blacklist.excludes("h2", 14.6));
  blacklist.add("h2", 20, 0.0);  // 8 s
  blacklist.add("h2", 21, 0.0);  // still cooling down: not counted again
  EXPECT_FALSE(blacklist.excludes("h2", 28.1));
  HostBlacklist capped(std::pair(1.0, 3.0));
  for (int i = 0; i < 5; ++i) capped.add("h0", i * 10.0, 0.9);
  EXPECT_TRUE(capped.excludes("h0", 42.9));
  EXPECT_FALSE(capped.excludes("h0", 43.1));
}

TEST(ElasticHosts, ChoosesHostsInDiscoveryOrderUpToMaxNp) {
  const std::vector<DiscoveredHost> found = {{"h0", 2}, {"h1", 2}, {"h2", 2}};
  HostBlacklist blacklist(std::nullopt);
  auto all = choose_hosts(found, blacklist, 0, 2, 5);
  ASSERT_TRUE(all);
  EXPECT_EQ(all->host_list, "h0:2,h1:2,h2:1");
  EXPECT_EQ(all->np, 5);
  blacklist.add("h1", 0, 0);
  auto left = choose_hosts(found, blacklist, 0, 2, 5);
  ASSERT_TRUE(left);
  EXPECT_EQ(left->host_list, "h0:2,h2:2");
  EXPECT_EQ(left->names, (std::vector<std::string>{"h0", "h2"}));
  EXPECT_FALSE(choose_hosts(found, blacklist, 0, 5, 8));  // 4 slots left, --min-np 5
}

TEST(ElasticHosts, FailedHostsFromMpirunsAndRanktimesMessages) {
  const std::vector<std::string> hosts = {"h0", "h1", "h2"};
  EXPECT_EQ(failed_hosts("mpirun noticed that process rank 2 with PID 77 on node h2 exited on "
                         "signal 9 (Killed).",
                         hosts),
            std::vector<std::string>{"h2"});
  EXPECT_EQ(failed_hosts("ORTE has lost communication with a remote daemon.\n  Remote daemon: "
                         "[[123,0],2] on node h1\n",
                         hosts),
            std::vector<std::string>{"h1"});
  EXPECT_EQ(failed_hosts("rank 0 gave up: rank 2 (host h1, pid 5) has sent nothing for 5.0 s "
                         "(RANKTIME_PEER_TIMEOUT_S=5.0): host h1 (ranks 2, 3) cannot be reached",
                         hosts),
            std::vector<std::string>{"h1"});
  EXPECT_EQ(failed_hosts("rank 0 (host h0, pid 9) has sent nothing for 5.0 s", hosts),
            std::vector<std::string>{"h0"});
  EXPECT_EQ(failed_hosts("agent: connect to host h2 (10.0.0.3): host unreachable", hosts),
            std::vector<std::string>{"h2"});
  // A host outside the attempt, or one only mentioned, is not taken.
  EXPECT_TRUE(failed_hosts("on node h9 exited on signal 9", hosts).empty());
  EXPECT_TRUE(failed_hosts("rank 2 (host h1, pid 5) failed its allreduce", hosts).empty());
}

TEST(ElasticHosts, EachAttemptHasItsOwnTrace) {
  EXPECT_EQ(attempt_trace_path("/d/t.json", 0), "/d/t.json");
  EXPECT_EQ(attempt_trace_path("/d/t.json", 1), "/d/t.attempt1.json");
  EXPECT_EQ(attempt_trace_path("/d/t.json.gz", 12), "/d/t.attempt12.json.gz");
  EXPECT_EQ(attempt_trace_path("/d/trace", 2), "/d/trace.attempt2");
}

}  // namespace
}  // namespace ranktime::cli
