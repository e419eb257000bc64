// Webhooks against a real HTTP receiver on a loopback socket and a real job store: a job
// end is posted once, signed, retried after a 500 and recorded as an event; a receiver
// that never answers is given up after max_attempts and said so; the last point of a
// sweep to end posts sweep.finished once; events name a receiver by its host, never by
// the path or query that may hold its secret; one owner's flood of job ends neither delays
// nor drops another owner's (server/webhooks.h).
#include "server/webhooks.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <condition_variable>
#include <future>
#include <mutex>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "nlohmann/json.hpp"
#include "server/metrics.h"
#include "server/webhook_queue.h"
#include "storage/job_store.h"
#include "tests/testing/process.h"
#include "tests/testing/store_fixture.h"
#include "tests/testing/wait.h"

namespace llamafleet {
namespace {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;

struct Received {
  std::string target, signature, event, delivery, body;
};

// Answers each POST with the next status of `statuses` (the last one repeats), each after
// `delay` (a slow receiver); with `hold_first`, the first POST is answered only once
// Release() is called.
class Receiver {
 public:
  explicit Receiver(std::vector<int> statuses, absl::Duration delay = absl::ZeroDuration(),
                    bool hold_first = false)
      : statuses_(std::move(statuses)),
        delay_(delay),
        held_(hold_first),
        acceptor_(ioc_, {net::ip::make_address("127.0.0.1"), 0}) {
    thread_ = std::thread([this] { Serve(); });
  }
  ~Receiver() {
    Release();
    stop_ = true;
    beast::error_code ec;
    tcp::socket poke(ioc_);
    poke.connect(acceptor_.local_endpoint(), ec);  // wakes accept()
    thread_.join();
  }
  std::string url(const std::string& path = "/hook") const {
    return absl::StrCat("http://127.0.0.1:", acceptor_.local_endpoint().port(), path);
  }
  std::vector<Received> received() {
    std::lock_guard<std::mutex> lock(mu_);
    return received_;
  }
  // Lets the held first POST be answered.
  void Release() {
    std::lock_guard<std::mutex> lock(mu_);
    held_ = false;
    released_.notify_all();
  }
  // Waits until `n` requests arrived.
  std::vector<Received> WaitFor(size_t n, absl::Duration timeout = absl::Seconds(20)) {
    testing::WaitFor([&] { return received().size() >= n; }, timeout);
    return received();
  }

 private:
  void Serve() {
    size_t served = 0;
    while (!stop_) {
      tcp::socket socket(ioc_);
      beast::error_code ec;
      acceptor_.accept(socket, ec);
      if (ec || stop_) continue;
      beast::flat_buffer buffer;
      http::request<http::string_body> req;
      http::read(socket, buffer, req, ec);
      if (ec) continue;
      {
        std::unique_lock<std::mutex> lock(mu_);
        received_.push_back({std::string(req.target()), std::string(req["X-Llamafleet-Signature"]),
                             std::string(req["X-Llamafleet-Event"]),
                             std::string(req["X-Llamafleet-Delivery"]), req.body()});
        if (served == 0) released_.wait(lock, [&] { return !held_; });
      }
      if (delay_ > absl::ZeroDuration()) absl::SleepFor(delay_);
      http::response<http::string_body> res{
          static_cast<http::status>(statuses_[std::min(served++, statuses_.size() - 1)]), 11};
      res.body() = "ok";
      res.prepare_payload();
      http::write(socket, res, ec);
    }
  }

  std::vector<int> statuses_;
  const absl::Duration delay_;
  bool held_;  // guarded by mu_
  std::condition_variable released_;
  net::io_context ioc_;
  tcp::acceptor acceptor_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  std::mutex mu_;
  std::vector<Received> received_;
};

class WebhooksTest : public testing::StoreTest {
 protected:
  void SetUp() override {
    JobStoreOptions so = Options();
    so.clock = Clock::Real();
    so.synchronous_full = false;
    store_ = Open(so);
    ASSERT_NE(store_, nullptr);
  }

  std::unique_ptr<WebhookNotifier> Start(std::vector<std::string> urls, int max_attempts = 3,
                                         const std::function<void(WebhookOptions*)>& tweak = {}) {
    WebhookOptions o;
    o.urls = std::move(urls);
    o.secret = "s3cret";
    o.max_attempts = max_attempts;
    o.first_backoff = absl::Milliseconds(50);
    o.timeout = absl::Milliseconds(500);
    if (tweak) tweak(&o);
    absl::StatusOr<std::unique_ptr<WebhookNotifier>> n = WebhookNotifier::Start(store_.get(), o);
    EXPECT_TRUE(n.ok()) << n.status();
    return n.ok() ? std::move(*n) : nullptr;
  }

  // Submits `owner`'s jobs named `names` (as points of sweep `sweep` when given) and returns
  // their ids.
  std::vector<int64_t> Submit(const std::vector<std::string>& names, const std::string& sweep = "",
                              const std::string& owner = "alice") {
    std::vector<SubmitJobInput> inputs;
    for (size_t i = 0; i < names.size(); ++i) {
      SubmitJobInput in;
      in.owner = owner;
      in.spec.set_name(names[i]);
      in.spec.set_queue("default");
      if (!sweep.empty()) {
        (*in.spec.mutable_labels())["sweep"] = sweep;
        v1::SweepPoint* p = in.spec.mutable_sweep()->mutable_point();
        p->set_sweep(sweep);
        p->set_index(static_cast<int>(i));
        p->set_points(static_cast<int>(names.size()));
      }
      inputs.push_back(std::move(in));
    }
    std::promise<std::vector<int64_t>> ids;
    store_->SubmitJobs(std::move(inputs), [&](absl::StatusOr<std::vector<SubmitJobResult>> r) {
      std::vector<int64_t> out;
      if (r.ok()) {
        for (const SubmitJobResult& j : *r) out.push_back(std::stoll(j.job.id()));
      }
      ids.set_value(out);
    });
    return ids.get_future().get();
  }

  void Cancel(int64_t id, const std::string& actor = "alice") { CancelAll({id}, actor); }

  // Cancels every job of `ids` at once (the store commits them in a few transactions).
  void CancelAll(const std::vector<int64_t>& ids, const std::string& actor) {
    std::mutex mu;
    std::condition_variable cv;
    size_t left = ids.size();
    for (int64_t id : ids) {
      store_->CancelJob(id, actor, "enough", [&](absl::StatusOr<CancelJobResult>) {
        std::lock_guard<std::mutex> lock(mu);
        if (--left == 0) cv.notify_all();
      });
    }
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return left == 0; });
  }

  static std::vector<std::string> Names(const std::string& prefix, int n) {
    std::vector<std::string> out;
    for (int i = 0; i < n; ++i) out.push_back(absl::StrCat(prefix, "-", i));
    return out;
  }

  // The job.finished deliveries `received` holds for `owner`'s jobs.
  static int FinishedOf(const std::vector<Received>& received, const std::string& owner) {
    int n = 0;
    for (const Received& r : received) {
      n += r.event == "job.finished" &&
           absl::StrContains(r.body, absl::StrCat("\"owner\":\"", owner, "\""));
    }
    return n;
  }

  // The job's "webhook" events' reasons.
  std::vector<std::string> Notes(int64_t id, size_t want,
                                 absl::Duration timeout = absl::Seconds(20)) {
    std::vector<std::string> notes;
    testing::WaitFor(
        [&] {
          notes.clear();
          absl::StatusOr<std::vector<v1::JobEvent>> events = store_->GetEvents(id, 0, 1000);
          if (events.ok()) {
            for (const v1::JobEvent& e : *events) {
              if (e.type() == "webhook") notes.push_back(e.reason());
            }
          }
          return notes.size() >= want;
        },
        timeout);
    return notes;
  }

  std::unique_ptr<JobStore> store_;
};

TEST_F(WebhooksTest, AJobsEndIsPostedSignedRetriedAndRecorded) {
  Receiver receiver({500, 200});
  std::unique_ptr<WebhookNotifier> notifier = Start({receiver.url()});
  const int64_t id = Submit({"finetune"})[0];
  Cancel(id);
  std::vector<Received> got = receiver.WaitFor(2);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].body, got[1].body) << "a retry posts the same body";
  EXPECT_EQ(got[0].delivery, got[1].delivery);
  EXPECT_EQ(got[1].target, "/hook");
  EXPECT_EQ(got[1].event, "job.finished");
  EXPECT_EQ(got[1].signature, WebhookSignature("s3cret", got[1].body));
  EXPECT_NE(got[1].signature, WebhookSignature("another", got[1].body));
  const nlohmann::json body = nlohmann::json::parse(got[1].body);
  EXPECT_EQ(body["type"], "job.finished");
  EXPECT_EQ(body["job"]["id"], std::to_string(id));
  EXPECT_EQ(body["job"]["name"], "finetune");
  EXPECT_EQ(body["job"]["owner"], "alice");
  EXPECT_EQ(body["job"]["state"], "CANCELLED");
  EXPECT_TRUE(absl::StrContains(body["job"]["reason"].get<std::string>(), "enough"));
  const std::vector<std::string> notes = Notes(id, 1);
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_EQ(notes[0],
            absl::StrCat("job.finished delivered to ", receiver.url(""), " (HTTP 200, try 2)"));
  // The note is not a job end: nothing more is posted (a wait for nothing to happen).
  absl::SleepFor(absl::Milliseconds(300));
  EXPECT_EQ(receiver.received().size(), 2u);
}

TEST_F(WebhooksTest, AnUnreachableReceiverIsGivenUpAndSaidSo) {
  // A port nothing listens on: connection refused on every try.
  std::string url;
  {
    Receiver gone({200});
    url = gone.url();
  }
  std::unique_ptr<WebhookNotifier> notifier = Start({url}, /*max_attempts=*/3);
  const int64_t id = Submit({"lonely"})[0];
  const absl::Time cancelled = absl::Now();
  Cancel(id);
  const std::vector<std::string> notes = Notes(id, 1);
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_TRUE(absl::StartsWith(
      notes[0], absl::StrCat("job.finished not delivered to ", WebhookUrlForDisplay(url),
                             " after 3 tries: connect")))
      << notes[0];
  EXPECT_GE(absl::Now() - cancelled, absl::Milliseconds(150))
      << "50 ms, then 100 ms between the tries";
  EXPECT_EQ(notifier->failed(), 1);
}

TEST_F(WebhooksTest, TheLastPointOfASweepPostsSweepFinishedOnce) {
  Receiver receiver({200});
  std::unique_ptr<WebhookNotifier> notifier = Start({receiver.url()});
  const std::vector<int64_t> ids = Submit({"lr-0", "lr-1", "lr-2"}, "lr");
  Cancel(ids[0]);
  receiver.WaitFor(1);
  Cancel(ids[1]);
  Cancel(ids[2]);
  std::vector<Received> got = receiver.WaitFor(4);
  absl::SleepFor(absl::Milliseconds(300));  // time for a second sweep.finished, which must not come
  got = receiver.received();
  int sweeps = 0;
  for (const Received& r : got) {
    if (r.event != "sweep.finished") continue;
    ++sweeps;
    const nlohmann::json body = nlohmann::json::parse(r.body);
    EXPECT_EQ(body["sweep"]["name"], "lr");
    EXPECT_EQ(body["sweep"]["jobs"], 3);
    EXPECT_EQ(body["sweep"]["states"]["CANCELLED"], 3);
  }
  EXPECT_EQ(sweeps, 1);
  EXPECT_EQ(got.size(), 4u) << "three job.finished and one sweep.finished";
}

// Every viewer reads a job's events, and a receiver's URL may be its credential (a
// Slack-style hook): an outcome names the receiver by scheme, host and port only.
TEST_F(WebhooksTest, EventsNameAReceiverByItsHostNeverByItsPathOrQuery) {
  Receiver receiver({200});
  std::string gone_url;
  {
    Receiver gone({200});
    gone_url = gone.url("/secret-path?token=y");
  }
  const std::string url = receiver.url("/secret-path?token=x");
  std::unique_ptr<WebhookNotifier> notifier = Start({url, gone_url}, /*max_attempts=*/1);
  const int64_t id = Submit({"quiet"})[0];
  Cancel(id);
  const std::vector<std::string> notes = Notes(id, 2);
  ASSERT_EQ(notes.size(), 2u);
  for (const std::string& note : notes) {
    EXPECT_FALSE(absl::StrContains(note, "secret-path")) << note;
    EXPECT_FALSE(absl::StrContains(note, "token")) << note;
  }
  EXPECT_NE(
      std::find(notes.begin(), notes.end(),
                absl::StrCat("job.finished delivered to ", receiver.url(""), " (HTTP 200, try 1)")),
      notes.end())
      << notes[0] << " | " << notes[1];
  ASSERT_EQ(receiver.received().size(), 1u);
  EXPECT_EQ(receiver.received()[0].target, "/secret-path?token=x") << "the whole URL is posted to";
}

// A user's sweep of 1,000 points, cancelled at once, floods a slow receiver (20 ms a POST,
// 20 s for them all): another user's job end is posted within a bound, not after them.
TEST_F(WebhooksTest, AnotherOwnersFloodDoesNotDelayAJobEnd) {
  Receiver receiver({200}, /*delay=*/absl::Milliseconds(20));
  std::unique_ptr<WebhookNotifier> notifier = Start({receiver.url()});
  const std::vector<int64_t> flood = Submit(Names("lr", 1000), "lr", "alice");
  ASSERT_EQ(flood.size(), 1000u);
  const int64_t bobs = Submit({"bobs"}, "", "bob")[0];
  CancelAll(flood, "alice");
  receiver.WaitFor(1);  // alice's deliveries are being posted
  const absl::Time cancelled = absl::Now();
  Cancel(bobs, "bob");
  testing::WaitFor([&] { return FinishedOf(receiver.received(), "bob") == 1; }, absl::Seconds(5));
  const absl::Duration waited = absl::Now() - cancelled;
  const std::vector<Received> got = receiver.received();
  ASSERT_EQ(FinishedOf(got, "bob"), 1) << "bob's job end not posted within 5 s; "
                                       << FinishedOf(got, "alice") << " of alice's 1000 were";
  EXPECT_LT(waited, absl::Seconds(2))
      << FinishedOf(got, "alice") << " of alice's 1000 were posted first";
}

// The receiver holds the first POST (alice's) while bob's job end and then 30 more of
// alice's wait in a queue of 10: alice's are dropped to make room, never bob's, and every
// drop is counted.
TEST_F(WebhooksTest, AFullQueueDropsTheFloodingOwnersDeliveriesNotAnothers) {
  Receiver receiver({200}, absl::ZeroDuration(), /*hold_first=*/true);
  CoordinatorMetrics metrics(CoordinatorMetricsOptions{});
  std::unique_ptr<WebhookNotifier> notifier = Start({receiver.url()}, 3, [&](WebhookOptions* o) {
    o->max_pending = 10;
    o->timeout = absl::Seconds(20);
    o->dropped_counter = metrics.webhook_deliveries_dropped();
  });
  const std::vector<int64_t> alices = Submit(Names("a", 31), "", "alice");
  const int64_t bobs = Submit({"b"}, "", "bob")[0];
  Cancel(alices[0], "alice");
  receiver.WaitFor(1);  // held
  Cancel(bobs, "bob");
  absl::SleepFor(absl::Milliseconds(200));  // bob's end is read while alice's first is held
  for (size_t i = 1; i < alices.size(); ++i) Cancel(alices[i], "alice");
  testing::WaitFor([&] { return notifier->dropped() >= 21; }, absl::Seconds(5));
  EXPECT_EQ(notifier->dropped(), 21) << "31 waiting for 10 places";
  EXPECT_TRUE(
      absl::StrContains(metrics.Render(), "\nllamafleet_webhook_deliveries_dropped_total 21\n"));
  receiver.Release();
  testing::WaitFor([&] { return FinishedOf(receiver.received(), "bob") == 1; }, absl::Seconds(5));
  EXPECT_EQ(FinishedOf(receiver.received(), "bob"), 1)
      << "bob's job end was dropped for alice's flood";
  testing::WaitFor([&] { return receiver.received().size() >= 11; }, absl::Seconds(5));
  EXPECT_EQ(FinishedOf(receiver.received(), "alice"), 10)
      << "the held one and the 9 newest that fit";
}

// One owner's bound: past max_pending_per_owner their own oldest goes, whatever room the
// queue has in all.
TEST_F(WebhooksTest, AnOwnersBoundDropsOnlyThatOwnersDeliveries) {
  Receiver receiver({200}, absl::ZeroDuration(), /*hold_first=*/true);
  std::unique_ptr<WebhookNotifier> notifier = Start({receiver.url()}, 3, [](WebhookOptions* o) {
    o->max_pending_per_owner = 3;
    o->timeout = absl::Seconds(20);
  });
  const std::vector<int64_t> alices = Submit(Names("a", 9), "", "alice");
  const std::vector<int64_t> bobs = Submit(Names("b", 3), "", "bob");
  Cancel(alices[0], "alice");
  receiver.WaitFor(1);  // held
  CancelAll(bobs, "bob");
  CancelAll({alices.begin() + 1, alices.end()}, "alice");
  testing::WaitFor([&] { return notifier->dropped() >= 5; }, absl::Seconds(5));
  EXPECT_EQ(notifier->dropped(), 5) << "alice's 8 waiting for her 3 places";
  receiver.Release();
  testing::WaitFor([&] { return receiver.received().size() >= 7; }, absl::Seconds(5));
  absl::SleepFor(absl::Milliseconds(200));  // time for an eighth, which must not come
  EXPECT_EQ(FinishedOf(receiver.received(), "bob"), 3);
  EXPECT_EQ(FinishedOf(receiver.received(), "alice"), 4) << "the held one and her 3 newest";
}

WebhookDelivery To(const std::string& owner, const std::string& id) {
  WebhookDelivery d;
  d.owner = owner;
  d.id = id;
  return d;
}

TEST(WebhookQueueTest, OwnersAreServedInTurnWhateverEachHasWaiting) {
  WebhookQueue q({.max_pending = 100, .max_pending_per_owner = 100});
  const absl::Time now = absl::FromUnixSeconds(1000);
  for (int i = 0; i < 50; ++i) q.Push(To("alice", absl::StrCat("a", i)), now);
  q.Push(To("bob", "b0"), now);
  q.Push(To("carol", "c0"), now + absl::Seconds(5));  // a retry, not due yet
  std::vector<std::string> order;
  for (int i = 0; i < 4; ++i) order.push_back(q.PopDue(now)->id);
  EXPECT_EQ(order, (std::vector<std::string>{"a0", "b0", "a1", "a2"}));
  EXPECT_EQ(q.NextDue(), now);
  EXPECT_EQ(q.PopDue(now + absl::Seconds(5))->id, "c0") << "carol's turn comes once hers is due";
  EXPECT_EQ(q.size(), 47u);
  WebhookQueue empty({});
  EXPECT_FALSE(empty.PopDue(now).has_value());
  EXPECT_EQ(empty.NextDue(), absl::InfiniteFuture());
}

TEST(WebhookQueueTest, ABoundDropsTheOwnersOrTheFullestOwnersSoonestDue) {
  WebhookQueue q({.max_pending = 5, .max_pending_per_owner = 3});
  const absl::Time now = absl::FromUnixSeconds(1000);
  EXPECT_FALSE(q.Push(To("alice", "a0"), now).has_value());
  EXPECT_FALSE(q.Push(To("alice", "a1"), now).has_value());
  EXPECT_FALSE(q.Push(To("alice", "a2"), now).has_value());
  std::optional<WebhookQueue::Dropped> d = q.Push(To("alice", "a3"), now);
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->delivery.id, "a0");
  EXPECT_TRUE(d->owner_bound);
  EXPECT_FALSE(q.Push(To("bob", "b0"), now).has_value());
  EXPECT_FALSE(q.Push(To("bob", "b1"), now).has_value());
  d = q.Push(To("carol", "c0"), now);  // 5 in all: the fullest (alice, 3) pays
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->delivery.id, "a1");
  EXPECT_FALSE(d->owner_bound);
  EXPECT_EQ(q.waiting("alice"), 2u);
  EXPECT_EQ(q.waiting("bob"), 2u);
  EXPECT_EQ(q.waiting("carol"), 1u);
  EXPECT_EQ(q.size(), 5u);
}

TEST(WebhookUrlTest, EventsAndLogsShowOnlySchemeHostAndPort) {
  EXPECT_EQ(WebhookUrlForDisplay("https://hooks.slack.com/services/T0/B0/XXXXSECRET"),
            "https://hooks.slack.com");
  EXPECT_EQ(WebhookUrlForDisplay("http://ci:8080/hook?token=abc#frag"), "http://ci:8080");
  EXPECT_EQ(WebhookUrlForDisplay("http://ci?token=abc"), "http://ci");
  EXPECT_EQ(WebhookUrlForDisplay("http://user:pw@h/x"), "(an invalid webhook URL)");
}

TEST(WebhookUrlTest, OnlyHttpAndHttpsWithAHost) {
  EXPECT_TRUE(ValidateWebhookUrl("http://hooks.internal:8080/llamafleet").ok());
  EXPECT_TRUE(ValidateWebhookUrl("https://hooks.example.com").ok());
  for (const char* bad : {"ftp://x/y", "http://", "http://:80/x", "http://user:pw@h/x",
                          "http://h:99999/", "http://h/a b", "file:///etc/passwd"}) {
    EXPECT_EQ(ValidateWebhookUrl(bad).code(), absl::StatusCode::kInvalidArgument) << bad;
  }
}

}  // namespace
}  // namespace llamafleet
