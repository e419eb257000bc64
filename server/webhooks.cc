#include "server/webhooks.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/ssl.h>

#include <algorithm>
#include <atomic>
#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/job_state.h"
#include "google/protobuf/util/time_util.h"
#include "jobspec/sweep.h"
#include "nlohmann/json.hpp"
#include "server/webhook_queue.h"
#include "spdlog/spdlog.h"
#include "storage/cluster_store.h"
#include "storage/job_store.h"

namespace llamafleet {
namespace {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;
using google::protobuf::util::TimeUtil;
using json = nlohmann::json;

struct Url {
  bool tls = false;
  std::string host, port, target;
  std::string display;  // scheme://host[:port]: what events and logs show
};

absl::StatusOr<Url> ParseUrl(const std::string& url) {
  Url u;
  absl::string_view rest = url;
  if (absl::ConsumePrefix(&rest, "https://")) {
    u.tls = true;
  } else if (!absl::ConsumePrefix(&rest, "http://")) {
    return absl::InvalidArgumentError(
        absl::StrCat("webhook URL ", url, ": must start with http:// or https://"));
  }
  // The authority ends at the path, the query or the fragment, whichever comes first; the
  // fragment is the client's own and is not sent.
  const size_t end = rest.find_first_of("/?#");
  absl::string_view authority = rest.substr(0, end);
  absl::string_view target = end == absl::string_view::npos ? "" : rest.substr(end);
  target = target.substr(0, target.find('#'));
  u.target = absl::StrCat(absl::StartsWith(target, "/") ? "" : "/", target);
  if (authority.find('@') != absl::string_view::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("webhook URL ", url, ": credentials in the URL are not taken"));
  }
  u.display = absl::StrCat(u.tls ? "https://" : "http://", authority);
  const size_t colon = authority.rfind(':');
  if (colon != absl::string_view::npos && authority.find(']') == absl::string_view::npos) {
    int port = 0;
    if (!absl::SimpleAtoi(authority.substr(colon + 1), &port) || port < 1 || port > 65535) {
      return absl::InvalidArgumentError(absl::StrCat("webhook URL ", url, ": bad port"));
    }
    u.port = std::to_string(port);
    authority = authority.substr(0, colon);
  } else {
    u.port = u.tls ? "443" : "80";
  }
  u.host = std::string(authority);
  if (u.host.empty())
    return absl::InvalidArgumentError(absl::StrCat("webhook URL ", url, ": no host"));
  for (char c : u.target) {
    if (static_cast<unsigned char>(c) <= ' ' || c == 0x7f) {
      return absl::InvalidArgumentError(
          absl::StrCat("webhook URL ", url, ": spaces or control characters"));
    }
  }
  return u;
}

// One POST within `timeout` (connect, TLS handshake, write and read together): the
// HTTP status, or UNAVAILABLE saying what failed.
absl::StatusOr<int> PostOnce(const Url& url,
                             const std::vector<std::pair<std::string, std::string>>& headers,
                             const std::string& body, absl::Duration timeout) {
  net::io_context ioc;
  beast::error_code ec;
  tcp::resolver resolver(ioc);
  const tcp::resolver::results_type endpoints = resolver.resolve(url.host, url.port, ec);
  if (ec)
    return absl::UnavailableError(absl::StrCat("cannot resolve ", url.host, ": ", ec.message()));
  http::request<http::string_body> req{http::verb::post, url.target, 11};
  req.set(http::field::host, url.host);
  req.set(http::field::user_agent, "llamafleet-coordinator");
  req.set(http::field::content_type, "application/json");
  for (const auto& [k, v] : headers) req.set(k, v);
  req.body() = body;
  req.prepare_payload();
  http::response_parser<http::string_body> parser;
  parser.body_limit(64 * 1024);  // the answer's body is not read; a bound on what it may cost
  beast::flat_buffer buffer;
  std::string failed;  // the stage that failed, "" while none has
  const auto deadline = absl::ToChronoMilliseconds(timeout);

  auto exchange = [&](auto& stream, auto&& handshake) {
    beast::get_lowest_layer(stream).expires_after(deadline);
    beast::get_lowest_layer(stream).async_connect(
        endpoints, [&](beast::error_code e, const tcp::endpoint&) {
          if (e) {
            failed = absl::StrCat("connect: ", e.message());
            return;
          }
          handshake([&](beast::error_code h) {
            if (h) {
              failed = absl::StrCat("TLS: ", h.message());
              return;
            }
            http::async_write(stream, req, [&](beast::error_code w, size_t) {
              if (w) {
                failed = absl::StrCat("write: ", w.message());
                return;
              }
              http::async_read(stream, buffer, parser, [&](beast::error_code r, size_t) {
                if (r) failed = absl::StrCat("read: ", r.message());
              });
            });
          });
        });
    ioc.run();
  };
  if (url.tls) {
    net::ssl::context ctx(net::ssl::context::tls_client);
    ctx.set_default_verify_paths();
    ctx.set_verify_mode(net::ssl::verify_peer);
    beast::ssl_stream<beast::tcp_stream> stream(ioc, ctx);
    if (!SSL_set_tlsext_host_name(stream.native_handle(), url.host.c_str())) {
      return absl::UnavailableError("TLS: cannot set the server name");
    }
    stream.set_verify_callback(net::ssl::host_name_verification(url.host));
    exchange(stream,
             [&](auto done) { stream.async_handshake(net::ssl::stream_base::client, done); });
  } else {
    beast::tcp_stream stream(ioc);
    exchange(stream, [](auto done) { done(beast::error_code()); });
  }
  if (!failed.empty()) return absl::UnavailableError(failed);
  if (!parser.is_done()) return absl::UnavailableError("no complete answer");
  return parser.get().result_int();
}

std::string Rfc3339(const google::protobuf::Timestamp& t) { return TimeUtil::ToString(t); }

// Dropped deliveries of one owner not logged yet, and when that owner's last line was.
struct DropLog {
  int64_t unlogged = 0;
  absl::Time last = absl::InfinitePast();
};

// A line per owner at most this often while their deliveries are being dropped.
constexpr absl::Duration kDropLogInterval = absl::Seconds(10);

// The owner a dropped job end is logged under when it was dropped before it was read.
constexpr char kOwnerNotRead[] = "(not read yet)";

}  // namespace

absl::Status ValidateWebhookUrl(const std::string& url) { return ParseUrl(url).status(); }

std::string WebhookUrlForDisplay(const std::string& url) {
  absl::StatusOr<Url> parsed = ParseUrl(url);
  return parsed.ok() ? parsed->display : "(an invalid webhook URL)";
}

std::string WebhookSignature(const std::string& secret, const std::string& body) {
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()),
       reinterpret_cast<const unsigned char*>(body.data()), body.size(), mac, &len);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out = "sha256=";
  for (unsigned int i = 0; i < len; ++i) {
    out.push_back(kHex[mac[i] >> 4]);
    out.push_back(kHex[mac[i] & 15]);
  }
  return out;
}

class WebhookNotifier::Impl {
 public:
  Impl(JobStore* store, WebhookOptions options, std::vector<Url> urls)
      : store_(store),
        options_(std::move(options)),
        urls_(std::move(urls)),
        queue_(WebhookQueueBounds{options_.max_pending, options_.max_pending_per_owner}) {}

  void Start() {
    subscription_ = store_->Subscribe([this](const v1::JobEvent& e) { OnCommitted(e); });
    reader_ = std::thread([this] { ReadEnds(); });
    poster_ = std::thread([this] { PostDue(); });
  }

  ~Impl() {
    store_->Unsubscribe(subscription_);
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    ended_cv_.notify_all();
    due_cv_.notify_all();
    if (reader_.joinable()) reader_.join();
    if (poster_.joinable()) poster_.join();
    if (!ended_.empty() || queue_.size() > 0) {
      spdlog::warn("webhooks: {} job ends and {} deliveries not sent at shutdown", ended_.size(),
                   queue_.size());
    }
    LogDrops(absl::InfiniteFuture());
  }

  std::atomic<int64_t> failed{0};
  std::atomic<int64_t> dropped{0};

 private:
  // The writer thread: hand over, never block.
  void OnCommitted(const v1::JobEvent& e) {
    if (!EndsJob(e)) return;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (ended_.size() >= options_.max_pending) {
        // The reader is this far behind the writer: whose job it was is not known yet.
        ended_.pop_front();
        CountDrop(kOwnerNotRead);
      }
      ended_.push_back(e);
    }
    ended_cv_.notify_one();
  }

  // The reader thread: turns committed job ends into deliveries, a batch at a time, and
  // queues them under their owners.
  void ReadEnds() {
    std::unique_lock<std::mutex> lock(mu_);
    while (true) {
      ended_cv_.wait(lock, [&] { return stop_ || !ended_.empty(); });
      if (stop_) return;
      std::deque<v1::JobEvent> batch;
      batch.swap(ended_);
      lock.unlock();
      std::vector<WebhookDelivery> made = Deliveries(batch);
      lock.lock();
      const absl::Time now = absl::Now();
      for (WebhookDelivery& d : made) Queue(std::move(d), now);
      due_cv_.notify_one();
    }
  }

  // The poster thread: posts what is due, owners in turn (server/webhook_queue.h).
  void PostDue() {
    std::unique_lock<std::mutex> lock(mu_);
    while (!stop_) {
      const absl::Time now = absl::Now();
      LogDrops(now);
      std::optional<WebhookDelivery> d = queue_.PopDue(now);
      if (!d.has_value()) {
        absl::Time wake = queue_.NextDue();
        if (unlogged_drops_ > 0) wake = std::min(wake, now + kDropLogInterval);
        if (wake == absl::InfiniteFuture()) {
          due_cv_.wait(lock);
        } else {
          due_cv_.wait_for(lock, absl::ToChronoMicroseconds(wake - now));
        }
        continue;
      }
      lock.unlock();
      std::optional<absl::Time> retry = Send(*d);
      lock.lock();
      if (retry.has_value()) Queue(*std::move(d), *retry);
    }
  }

  // Queues `d` (mu_ held); a delivery dropped to make room is counted and logged.
  void Queue(WebhookDelivery d, absl::Time due) {
    std::optional<WebhookQueue::Dropped> out = queue_.Push(std::move(d), due);
    if (out.has_value()) CountDrop(out->delivery.owner);
  }

  // One dropped delivery of `owner` (mu_ held): counted at once; logged at once when it is
  // the owner's first in kDropLogInterval, else with a later line (LogDrops).
  void CountDrop(const std::string& owner) {
    ++dropped;
    if (options_.dropped_counter != nullptr) options_.dropped_counter->Increment();
    DropLog& log = drop_logs_[owner];
    ++log.unlogged;
    ++unlogged_drops_;
    const absl::Time now = absl::Now();
    if (now - log.last >= kDropLogInterval) LogDrop(owner, log, now);
  }

  // Logs the drops not logged yet (mu_ held) of each owner whose last line is at least
  // kDropLogInterval old at `now`; InfiniteFuture(): of every owner (at shutdown).
  void LogDrops(absl::Time now) {
    if (unlogged_drops_ == 0) return;
    for (auto& [owner, log] : drop_logs_) {
      if (log.unlogged > 0 &&
          (now == absl::InfiniteFuture() || now - log.last >= kDropLogInterval)) {
        LogDrop(owner, log, now);
      }
    }
  }

  void LogDrop(const std::string& owner, DropLog& log, absl::Time now) {
    spdlog::warn(
        "webhooks: owner {}: {} {} dropped unsent: more than {} waiting for one owner "
        "(max_pending_per_owner) or {} in all (max_pending)",
        owner, log.unlogged, log.unlogged == 1 ? "delivery" : "deliveries",
        options_.max_pending_per_owner, options_.max_pending);
    unlogged_drops_ -= log.unlogged;
    log.unlogged = 0;
    log.last = now;
  }

  // The bodies a batch of job ends makes: job.finished for each, and sweep.finished where
  // a job was the last unfinished point of its sweep; one delivery per URL each. A sweep
  // is looked at once per batch, at its last point there: a sweep cancelled whole ends in
  // one commit, and is listed once rather than once per point.
  std::vector<WebhookDelivery> Deliveries(const std::deque<v1::JobEvent>& ends) {
    std::vector<std::pair<const v1::JobEvent*, v1::Job>> jobs;
    for (const v1::JobEvent& e : ends) {
      int64_t id = 0;
      if (!absl::SimpleAtoi(e.job_id(), &id)) continue;
      absl::StatusOr<v1::Job> job = store_->GetJob(id);
      if (job.ok()) jobs.emplace_back(&e, *std::move(job));  // else deleted since
    }
    std::map<std::pair<std::string, std::string>, size_t> last_point;  // (owner, sweep) → index
    for (size_t i = 0; i < jobs.size(); ++i) {
      const std::string& sweep = jobs[i].second.spec().sweep().point().sweep();
      if (!sweep.empty()) last_point[{jobs[i].second.owner(), sweep}] = i;
    }
    std::vector<WebhookDelivery> out;
    for (size_t i = 0; i < jobs.size(); ++i) {
      const v1::JobEvent& e = *jobs[i].first;
      const v1::Job& job = jobs[i].second;
      Add("job.finished", absl::StrCat("job-", job.id(), "-", e.seq()), JobFinished(e, job), job,
          &out);
      const std::string& sweep = job.spec().sweep().point().sweep();
      if (sweep.empty() || last_point[{job.owner(), sweep}] != i) continue;
      if (std::optional<json> body = SweepFinished(job); body.has_value()) {
        Add("sweep.finished", (*body)["delivery"].get<std::string>(), *body, job, &out);
      }
    }
    return out;
  }

  // One delivery of `body` per URL, recorded on `job`.
  void Add(const std::string& type, const std::string& delivery_id, const json& body,
           const v1::Job& job, std::vector<WebhookDelivery>* out) {
    int64_t id = 0;
    (void)absl::SimpleAtoi(job.id(), &id);
    const std::string text = body.dump();
    for (size_t u = 0; u < urls_.size(); ++u) {
      out->push_back(WebhookDelivery{delivery_id, type, text, u, id, job.owner(), 0});
    }
  }

  // The job.finished body of `job`'s end `e`.
  static json JobFinished(const v1::JobEvent& e, const v1::Job& job) {
    json j = {{"id", job.id()},
              {"name", job.spec().name()},
              {"owner", job.owner()},
              {"queue", job.spec().queue()},
              {"state", v1::JobState_Name(e.to_state())},
              {"reason", e.reason()},
              {"attempts", job.attempts()},
              {"restarts", job.restarts()},
              {"labels", json::object()}};
    for (const auto& [k, v] : job.spec().labels()) j["labels"][k] = v;
    if (!job.spec().output().export_dir().empty())
      j["export_dir"] = job.spec().output().export_dir();
    json body = {{"type", "job.finished"}, {"time", Rfc3339(e.time())}, {"job", j}};
    const v1::SweepPoint& point = job.spec().sweep().point();
    if (!point.sweep().empty()) {
      body["sweep"] = {
          {"name", point.sweep()}, {"index", point.index()}, {"points", point.points()}};
    }
    return body;
  }

  // The sweep.finished body when every job of `job`'s sweep (its owner's jobs labelled
  // sweep=NAME) has ended, once per set of jobs; nullopt otherwise.
  std::optional<json> SweepFinished(const v1::Job& job) {
    const std::string& name = job.spec().sweep().point().sweep();
    ListJobsQuery q;
    q.owner = job.owner();
    q.labels = {{kSweepLabel, name}};
    q.page_size = kMaxSweepPoints;
    absl::StatusOr<ListJobsResult> listed = store_->ListJobs(q);
    if (!listed.ok()) return std::nullopt;
    std::map<std::string, int> by_state;
    int64_t low = 0, high = 0;
    for (const v1::Job& j : listed->jobs) {
      if (!IsTerminal(j.state())) return std::nullopt;
      ++by_state[v1::JobState_Name(j.state())];
      int64_t id = 0;
      (void)absl::SimpleAtoi(j.id(), &id);
      low = low == 0 ? id : std::min(low, id);
      high = std::max(high, id);
    }
    const std::string key =
        absl::StrCat(job.owner(), "/", name, "/", low, "-", high, "-", listed->jobs.size());
    if (!sweeps_told_.insert(key).second)
      return std::nullopt;  // a point ending at the same time told it
    json counts = json::object();
    for (const auto& [state, n] : by_state) counts[state] = n;
    return json{{"type", "sweep.finished"},
                {"delivery", absl::StrCat("sweep-", low, "-", high, "-", listed->jobs.size())},
                {"sweep",
                 {{"name", name},
                  {"owner", job.owner()},
                  {"jobs", listed->jobs.size()},
                  {"states", counts}}}};
  }

  // Posts `d` once; the time of its next try, or nullopt when it is done (delivered or
  // given up), with the outcome recorded on the job.
  std::optional<absl::Time> Send(WebhookDelivery& d) {
    ++d.tries;
    const std::string& url = urls_[d.url].display;  // never its path: it may hold a secret
    absl::StatusOr<int> status =
        PostOnce(urls_[d.url],
                 {{"X-Llamafleet-Signature", WebhookSignature(options_.secret, d.body)},
                  {"X-Llamafleet-Event", d.type},
                  {"X-Llamafleet-Delivery", d.id}},
                 d.body, options_.timeout);
    std::string what;
    if (status.ok() && *status >= 200 && *status < 300) {
      what =
          absl::StrCat(d.type, " delivered to ", url, " (HTTP ", *status, ", try ", d.tries, ")");
    } else {
      const std::string why =
          status.ok() ? absl::StrCat("HTTP ", *status) : std::string(status.status().message());
      if (d.tries < options_.max_attempts) {
        spdlog::info("webhooks: {} to {} failed (try {}): {}", d.type, url, d.tries, why);
        return absl::Now() + options_.first_backoff * (1 << std::min(d.tries - 1, 20));
      }
      ++failed;
      what = absl::StrCat(d.type, " not delivered to ", url, " after ", d.tries, " tries: ", why);
      spdlog::warn("webhooks: job {}: {}", d.job_id, what);
    }
    store_->Write(RecordJobNoteTxn(d.job_id, "webhook", what), [](absl::Status) {});
    return std::nullopt;
  }

  JobStore* const store_;
  const WebhookOptions options_;
  const std::vector<Url> urls_;
  int64_t subscription_ = 0;
  std::set<std::string> sweeps_told_;  // the reader thread's

  std::mutex mu_;
  std::condition_variable ended_cv_;  // ended_ grew, or stop_
  std::condition_variable due_cv_;    // queue_ grew, or stop_
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  // Committed job ends the reader has not read yet (at most max_pending).
  std::deque<v1::JobEvent> ended_ ABSL_GUARDED_BY(mu_);
  WebhookQueue queue_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, DropLog> drop_logs_ ABSL_GUARDED_BY(mu_);  // by owner
  int64_t unlogged_drops_ ABSL_GUARDED_BY(mu_) = 0;
  std::thread reader_;
  std::thread poster_;
};

absl::StatusOr<std::unique_ptr<WebhookNotifier>> WebhookNotifier::Start(JobStore* store,
                                                                        WebhookOptions options) {
  if (options.secret.empty())
    return absl::InvalidArgumentError("webhooks need a secret (--webhook-secret-file)");
  if (options.max_attempts < 1 || options.max_pending < 1 || options.max_pending_per_owner < 1) {
    return absl::InvalidArgumentError(
        "webhooks: max_attempts, max_pending and max_pending_per_owner must be >= 1");
  }
  std::vector<Url> urls;
  for (const std::string& u : options.urls) {
    absl::StatusOr<Url> parsed = ParseUrl(u);
    if (!parsed.ok()) return parsed.status();
    urls.push_back(*std::move(parsed));
  }
  auto impl = std::make_unique<Impl>(store, std::move(options), std::move(urls));
  impl->Start();
  return std::unique_ptr<WebhookNotifier>(new WebhookNotifier(std::move(impl)));
}

WebhookNotifier::WebhookNotifier(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
WebhookNotifier::~WebhookNotifier() = default;
int64_t WebhookNotifier::failed() const { return impl_->failed.load(); }
int64_t WebhookNotifier::dropped() const { return impl_->dropped.load(); }

}  // namespace llamafleet
