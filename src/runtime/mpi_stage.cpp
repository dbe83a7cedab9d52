// Pipeline stages on other MPI ranks: rank 0's RemoteStage and the workers' loop (mpi_stage.h).
//
// Messages (rank 0 ↔ rank k, MPI_BYTE buffers of int64 / int32 / f32 fields in this order):
//   kTagCmd  0 → k   int64 cmd, then per cmd:
//     kStart   layer0 layer1 n_slots context kv_blocks kv_type n_layers n_params
//              → reply: status, then (ok) paged kv_bytes
//     kRun     T n_seqs D_in | int32 tokens[T] | int64 (slot pos0 n_tokens)[n_seqs] | f32 in[T,
//     D_in]
//              → reply: status, then (ok) f32 rows[T, D]
//     kTable   slot n | int32 blocks[n]          (no reply; a failure comes back with the next run)
//     kStop    (no reply) the stage is dropped
//     kExit    (no reply) the worker finalizes
//   kTagReply k → 0  int64 status (0 ok, 1 error: the rest is the message), payload
//   kTagBeat  k → 0  one int, every kBeatS while the worker is busy (loading, a command)
#include "edgeseek/internal/runtime/mpi_stage.h"

#include <time.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <thread>

#include "edgeseek/internal/core/error.h"
#include "edgeseek/internal/models/config.h"
#include "edgeseek/internal/runtime/model.h"

#if ES_HAVE_MPI
#include <mpi.h>
#endif

namespace es {

#if ES_HAVE_MPI

namespace {

enum Tag : int { kTagCmd = 1, kTagReply = 2, kTagBeat = 3 };
enum Cmd : int64_t { kStart = 1, kRun = 2, kTable = 3, kStop = 4, kExit = 5 };

// A computing rank beats every kBeatS; kLostS of silence (twelve beats missed) means it is gone.
// A step of the largest model on the slowest device still beats: the beat comes from its own
// thread, not from the step.
constexpr double kBeatS = 0.25;
constexpr double kLostS = 3.0;

struct World {
  bool on = false;
  int rank = 0, size = 1;
  std::atomic<bool> lost{false};  // rank 0: a worker stopped answering (stages run on threads)
  bool claimed = false;           // rank 0: the workers serve a runner's stages
  std::atomic<bool> busy{false}, beating{false};
  std::thread beat;
  std::function<void()> on_lost;
};
World& W() {
  static World w;
  return w;
}

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Waits between polls: the first ones back to back (a reply that is about to come), then naps
// that double from 10 us to kMaxNapUs, so that a waiting rank leaves the cores to the ranks
// that compute. A busy-polling MPI receive takes a whole core, which the 1-thread ranks of a
// 2-core machine need: with 20 us naps (50k wakeups a second) rank 0 of a 2-rank 1.5B decode
// waited 9 ms a token for a core. The longest nap bounds the latency it adds per hand-over.
constexpr long kMaxNapUs = 400;
class Backoff {
 public:
  void Wait() {
    if (++n_ < 64) return;
    timespec ts{0, nap_us_ * 1000};
    nanosleep(&ts, nullptr);
    nap_us_ = std::min(kMaxNapUs, nap_us_ * 2);
  }

 private:
  int n_ = 0;
  long nap_us_ = 10;
};

// ---- byte buffers ----
struct Writer {
  std::vector<char> b;
  template <class T>
  void Put(const T* p, size_t n) {
    const size_t o = b.size();
    b.resize(o + n * sizeof(T));
    if (n) std::memcpy(b.data() + o, p, n * sizeof(T));
  }
  void I64(int64_t v) { Put(&v, 1); }
};
struct Reader {
  const char* p;
  size_t left;
  template <class T>
  void Get(T* dst, size_t n) {
    ES_CHECK(n * sizeof(T) <= left, "MPI stage: a message is shorter than its header says");
    if (n) std::memcpy(dst, p, n * sizeof(T));
    p += n * sizeof(T), left -= n * sizeof(T);
  }
  int64_t I64() {
    int64_t v = 0;
    Get(&v, 1);
    return v;
  }
};

void BeatLoop() {
  World& w = W();
  const int one = 1;
  while (w.beating.load()) {
    if (w.busy.load()) MPI_Send(&one, 1, MPI_INT, 0, kTagBeat, MPI_COMM_WORLD);
    std::this_thread::sleep_for(std::chrono::milliseconds(int(kBeatS * 1000)));
  }
}

// Rank 0: sends `msg` to `rank` and, with `reply`, waits for its answer; a rank silent for kLostS
// (no beat, no reply) is lost: UnavailableError.
void Exchange(int rank, const std::vector<char>& msg, std::vector<char>* reply) {
  World& w = W();
  if (w.lost)
    throw UnavailableError("MPI rank " + std::to_string(rank) +
                           ": the layer split lost a rank earlier");
  MPI_Request req;
  MPI_Isend(msg.data(), int(msg.size()), MPI_BYTE, rank, kTagCmd, MPI_COMM_WORLD, &req);
  int sent = 0;
  double last = Now();
  Backoff backoff;
  for (;;) {
    if (!sent) MPI_Test(&req, &sent, MPI_STATUS_IGNORE);
    int flag = 0;
    MPI_Status st;
    MPI_Iprobe(rank, kTagBeat, MPI_COMM_WORLD, &flag, &st);
    if (flag) {
      int beat;
      MPI_Recv(&beat, 1, MPI_INT, rank, kTagBeat, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      last = Now();
      continue;
    }
    if (reply) {
      MPI_Message m;
      MPI_Improbe(rank, kTagReply, MPI_COMM_WORLD, &flag, &m, &st);
      if (flag) {
        int n = 0;
        MPI_Get_count(&st, MPI_BYTE, &n);
        reply->resize(size_t(n));
        MPI_Mrecv(reply->data(), n, MPI_BYTE, &m, MPI_STATUS_IGNORE);
        if (!sent) MPI_Wait(&req, MPI_STATUS_IGNORE);  // it was received: the send is done
        return;
      }
    } else if (sent) {
      return;
    }
    if (Now() - last > kLostS) {
      w.lost = true;
      if (w.on_lost) w.on_lost();
      // The send may never complete: leave the request (MPI is not finalized after a loss).
      throw UnavailableError("MPI rank " + std::to_string(rank) + " stopped answering (no reply " +
                             "or heartbeat for " + std::to_string(int(kLostS)) +
                             " s): the layer split lost a stage");
    }
    backoff.Wait();
  }
}

// The reply's payload after its status; an error reply throws its message.
Reader CheckReply(int rank, const std::vector<char>& reply) {
  Reader r{reply.data(), reply.size()};
  const int64_t status = r.I64();
  if (status != 0) Fail("MPI rank ", rank, ": ", std::string(r.p, r.left));
  return r;
}

class RemoteStage : public PipelineStage {
 public:
  explicit RemoteStage(int rank) : rank_(rank) {}
  ~RemoteStage() override {
    if (!started_ || W().lost) return;
    Writer m;
    m.I64(kStop);
    try {
      Exchange(rank_, m.b, nullptr);
    } catch (const Error& e) {
      std::fprintf(stderr, "edgeseek: %s\n", e.what());
    }
  }

  std::string description() const override { return "rank " + std::to_string(rank_); }

  void Start(const std::shared_ptr<const Model>& model, const StageConfig& cfg) override {
    D_ = model->config().hidden_size;
    first_ = cfg.layer0 == 0;
    Writer m;
    for (int64_t v : {int64_t(kStart), int64_t(cfg.layer0), int64_t(cfg.layer1),
                      int64_t(cfg.n_slots), cfg.context, cfg.kv_blocks, int64_t(cfg.kv_type),
                      int64_t(model->config().n_layers), model->n_params()})
      m.I64(v);
    std::vector<char> reply;
    Exchange(rank_, m.b, &reply);
    Reader r = CheckReply(rank_, reply);
    paged_ = r.I64() != 0;
    kv_bytes_ = size_t(r.I64());
    started_ = true;
  }

  void Run(const Batch& batch, const float* in, float* out, ComputeStats* stats) override {
    const double t0 = Now();
    const int64_t T = batch.n_tokens(), D_in = first_ ? 0 : D_;
    msg_.b.clear();
    for (int64_t v : {int64_t(kRun), T, int64_t(batch.seqs.size()), D_in}) msg_.I64(v);
    msg_.Put(batch.tokens.data(), size_t(T));
    for (const BatchSeq& s : batch.seqs)
      for (int64_t v : {int64_t(s.slot), s.pos0, int64_t(s.n_tokens)}) msg_.I64(v);
    if (D_in) msg_.Put(in, size_t(T * D_in));
    Exchange(rank_, msg_.b, &reply_);
    Reader r = CheckReply(rank_, reply_);
    r.Get(out, size_t(T * D_));
    if (stats) stats->total_s = Now() - t0;
  }

  void SetBlockTable(int slot, const int32_t* blocks, int n) override {
    Writer m;
    m.I64(kTable), m.I64(slot), m.I64(n);
    m.Put(blocks, size_t(n));
    Exchange(rank_, m.b, nullptr);
  }
  bool kv_paged() const override { return paged_; }
  size_t kv_bytes() const override { return kv_bytes_; }

 private:
  int rank_;
  int64_t D_ = 0;
  bool first_ = false, started_ = false, paged_ = false;
  size_t kv_bytes_ = 0;
  Writer msg_;
  std::vector<char> reply_;
};

// The claim on the workers, released by the last stage of the runner that holds it.
struct Claim {
  ~Claim() { W().claimed = false; }
};
class ClaimedStage : public PipelineStage {
 public:
  ClaimedStage(std::unique_ptr<PipelineStage> s, std::shared_ptr<Claim> c)
      : s_(std::move(s)), claim_(std::move(c)) {}
  std::string description() const override { return s_->description(); }
  void Start(const std::shared_ptr<const Model>& m, const StageConfig& c) override {
    s_->Start(m, c);
  }
  void Run(const Batch& b, const float* in, float* out, ComputeStats* st) override {
    s_->Run(b, in, out, st);
  }
  void SetBlockTable(int slot, const int32_t* blocks, int n) override {
    s_->SetBlockTable(slot, blocks, n);
  }
  bool kv_paged() const override { return s_->kv_paged(); }
  size_t kv_bytes() const override { return s_->kv_bytes(); }

 private:
  std::unique_ptr<PipelineStage> s_;
  std::shared_ptr<Claim> claim_;
};

// ---- the worker ----
void Reply(const Writer& w) {
  MPI_Send(w.b.data(), int(w.b.size()), MPI_BYTE, 0, kTagReply, MPI_COMM_WORLD);
}
void ReplyError(const std::string& what) {
  Writer w;
  w.I64(1);
  w.Put(what.data(), what.size());
  Reply(w);
}

}  // namespace

bool MpiBuilt() { return true; }

int MpiInit(int* argc, char*** argv) {
  World& w = W();
  if (w.on || (!std::getenv("OMPI_COMM_WORLD_SIZE") && !std::getenv("PMIX_RANK"))) return w.size;
  int provided = 0;
  MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided);
  ES_CHECK(provided >= MPI_THREAD_MULTIPLE, "MPI: this Open MPI gives thread level ", provided,
           " but the layer split's heartbeat needs MPI_THREAD_MULTIPLE");
  w.on = true;
  MPI_Comm_rank(MPI_COMM_WORLD, &w.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &w.size);
  if (w.rank > 0) {
    w.busy = true;  // loading the model
    w.beating = true;
    w.beat = std::thread(BeatLoop);
  }
  return w.size;
}

int MpiRank() { return W().rank; }
int MpiSize() { return W().size; }
void SetMpiLostHandler(std::function<void()> f) { W().on_lost = std::move(f); }

void RunMpiWorker(const std::shared_ptr<const Model>& model, const std::string& load_error,
                  const std::string& backend, const BackendOptions& bo) {
  World& w = W();
  ES_ASSERT(w.on && w.rank > 0);
  std::unique_ptr<PipelineStage> stage;
  int64_t D = model ? model->config().hidden_size : 0;
  std::string pending;  // a failed kTable, reported with the next reply
  std::vector<char> buf;
  std::vector<float> in, out;
  Batch batch;
  for (;;) {
    w.busy = false;
    MPI_Message m;
    MPI_Status st;
    int flag = 0;
    Backoff backoff;
    for (;;) {
      MPI_Improbe(0, kTagCmd, MPI_COMM_WORLD, &flag, &m, &st);
      if (flag) break;
      backoff.Wait();
    }
    w.busy = true;
    int n = 0;
    MPI_Get_count(&st, MPI_BYTE, &n);
    buf.resize(size_t(n));
    MPI_Mrecv(buf.data(), n, MPI_BYTE, &m, MPI_STATUS_IGNORE);
    Reader r{buf.data(), buf.size()};
    const int64_t cmd = r.I64();
    if (cmd == kExit) break;
    try {
      if (cmd == kStop) {
        stage.reset();
        pending.clear();
      } else if (cmd == kTable) {
        const int slot = int(r.I64());
        std::vector<int32_t> blocks(size_t(r.I64()));
        r.Get(blocks.data(), blocks.size());
        try {
          ES_CHECK(stage, "no stage to set a block table of");
          stage->SetBlockTable(slot, blocks.data(), int(blocks.size()));
        } catch (const Error& e) {
          if (pending.empty()) pending = e.what();
        }
      } else if (cmd == kStart) {
        StageConfig c;
        c.layer0 = int(r.I64()), c.layer1 = int(r.I64()), c.n_slots = int(r.I64());
        c.context = r.I64(), c.kv_blocks = r.I64(), c.kv_type = DType(r.I64());
        const int64_t n_layers = r.I64(), n_params = r.I64();
        ES_CHECK(model, "rank ", w.rank,
                 " has no model: ", load_error.empty() ? "its verb loads none" : load_error);
        ES_CHECK(model->config().n_layers == n_layers && model->n_params() == n_params, "rank ",
                 w.rank, " loaded '", model->name(), "' (", model->config().n_layers, " layers, ",
                 model->n_params(), " parameters), not rank 0's model (", n_layers, " layers, ",
                 n_params, " parameters): under mpirun only the verb's own model is split");
        stage.reset();
        pending.clear();
        auto s = MakeLocalStage(CreateBackend(backend, bo));
        s->Start(model, c);
        stage = std::move(s);
        Writer rep;
        rep.I64(0), rep.I64(stage->kv_paged() ? 1 : 0), rep.I64(int64_t(stage->kv_bytes()));
        Reply(rep);
      } else if (cmd == kRun) {
        const int64_t T = r.I64(), n_seqs = r.I64(), D_in = r.I64();
        std::vector<int32_t> tokens(static_cast<size_t>(T));
        r.Get(tokens.data(), tokens.size());
        batch = Batch{};
        size_t row = 0;
        for (int64_t i = 0; i < n_seqs; ++i) {
          const int slot = int(r.I64());
          const int64_t pos0 = r.I64();
          const int nt = int(r.I64());
          ES_CHECK(row + size_t(nt) <= tokens.size(), "MPI stage: sequences past the tokens");
          batch.Add(
              slot, pos0,
              std::vector<int32_t>(tokens.begin() + long(row), tokens.begin() + long(row + nt)));
          row += size_t(nt);
        }
        batch.Finalize();
        in.resize(size_t(T * D_in));
        r.Get(in.data(), in.size());
        ES_CHECK(stage, "rank ", w.rank, " has no stage to run (no start)");
        ES_CHECK(pending.empty(), pending);
        out.resize(size_t(T * D));
        stage->Run(batch, D_in ? in.data() : nullptr, out.data(), nullptr);
        Writer rep;
        rep.I64(0);
        rep.Put(out.data(), out.size());
        Reply(rep);
      }
    } catch (const std::exception& e) {
      if (cmd == kStart || cmd == kRun) ReplyError(e.what());
    }
  }
  w.busy = false;
  w.beating = false;
  if (w.beat.joinable()) w.beat.join();
  w.on = false;
  MPI_Finalize();
}

std::vector<std::unique_ptr<PipelineStage>> ClaimMpiStages() {
  World& w = W();
  std::vector<std::unique_ptr<PipelineStage>> out;
  if (!w.on || w.rank != 0 || w.size < 2 || w.claimed) return out;
  w.claimed = true;
  auto claim = std::make_shared<Claim>();
  for (int k = 1; k < w.size; ++k)
    out.push_back(std::make_unique<ClaimedStage>(std::make_unique<RemoteStage>(k), claim));
  return out;
}

bool MpiFinish() {
  World& w = W();
  if (!w.on) return false;
  w.on = false;
  if (w.rank != 0) {
    // A worker that never ran RunMpiWorker (its command line failed to parse): stop beating and
    // finalize with the others.
    w.beating = false;
    if (w.beat.joinable()) w.beat.join();
    MPI_Finalize();
    return false;
  }
  if (w.lost) return true;
  Writer m;
  m.I64(kExit);
  for (int k = 1; k < w.size; ++k) {
    try {
      Exchange(k, m.b, nullptr);
    } catch (const Error& e) {
      std::fprintf(stderr, "edgeseek: %s\n", e.what());
      return true;
    }
  }
  MPI_Finalize();
  return false;
}

#else  // !ES_HAVE_MPI

bool MpiBuilt() { return false; }
int MpiInit(int*, char***) { return 1; }
int MpiRank() { return 0; }
int MpiSize() { return 1; }
void SetMpiLostHandler(std::function<void()>) {}
void RunMpiWorker(const std::shared_ptr<const Model>&, const std::string&, const std::string&,
                  const BackendOptions&) {
  Fail("this edgeseek was built without MPI (install libopenmpi-dev and reconfigure)");
}
std::vector<std::unique_ptr<PipelineStage>> ClaimMpiStages() { return {}; }
bool MpiFinish() { return false; }

#endif

}  // namespace es
