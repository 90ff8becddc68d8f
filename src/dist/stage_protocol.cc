#include "dist/stage_protocol.h"

#include <algorithm>

#include "core/error.h"
#include "dist/stage_split.h"

namespace dfl::dist {

namespace {

constexpr int32_t kMagic = 0x44464c50;  // "DFLP"
constexpr int32_t kMaxCount = 1 << 24;

struct Reader {
  const int32_t* p;
  size_t n, i = 0;
  int32_t next() {
    DFL_CHECK(i < n, "pipeline command: truncated message (", n * 4, " bytes)");
    return p[i++];
  }
  int32_t count() {
    const int32_t c = next();
    DFL_CHECK(c >= 0 && c <= kMaxCount, "pipeline command: bad count ", c);
    return c;
  }
};

}  // namespace

std::vector<int32_t> encode_command(const StepCommand& c) {
  std::vector<int32_t> m = {kMagic, int32_t(c.op)};
  switch (c.op) {
    case StageOp::kLoad:
      m.insert(m.end(), {c.max_context, c.max_block, c.weights_format, c.prepack, c.window_edge});
      break;
    case StageOp::kAttachKv:
      m.insert(m.end(), {c.max_seqs, c.max_context, c.slack, c.block_slots,
                         int32_t(c.n_blocks & 0x7fffffff), int32_t(c.n_blocks >> 31), c.kv_dtype});
      break;
    case StageOp::kForward:
      m.push_back(c.group);
      m.push_back(int32_t(c.trims.size()));
      for (const SeqTrim& t : c.trims) m.insert(m.end(), {t.seq, t.length});
      m.push_back(int32_t(c.segs.size()));
      for (const auto& g : c.segs) m.insert(m.end(), {g.seq, g.n, g.pos0, int32_t(g.logits), int32_t(g.taps)});
      m.push_back(int32_t(c.aux.size()));
      m.insert(m.end(), c.aux.begin(), c.aux.end());
      m.push_back(int32_t(c.tokens.size()));
      m.insert(m.end(), c.tokens.begin(), c.tokens.end());
      break;
    case StageOp::kStop: break;
  }
  return m;
}

StepCommand decode_command(const uint8_t* data, size_t bytes) {
  DFL_CHECK(bytes % 4 == 0 && bytes >= 8, "pipeline command: bad size ", bytes);
  Reader r{reinterpret_cast<const int32_t*>(data), bytes / 4};
  DFL_CHECK(r.next() == kMagic, "pipeline command: bad magic (mismatched dflash builds?)");
  StepCommand c;
  const int32_t op = r.next();
  DFL_CHECK(op >= 1 && op <= 4, "pipeline command: unknown op ", op);
  c.op = StageOp(op);
  switch (c.op) {
    case StageOp::kLoad:
      c.max_context = r.next();
      c.max_block = r.next();
      c.weights_format = r.next();
      c.prepack = r.next();
      c.window_edge = r.next();
      break;
    case StageOp::kAttachKv:
      c.max_seqs = r.next();
      c.max_context = r.next();
      c.slack = r.next();
      c.block_slots = r.next();
      c.n_blocks = int64_t(uint32_t(r.next())) | (int64_t(r.next()) << 31);
      c.kv_dtype = r.next();
      break;
    case StageOp::kForward: {
      c.group = r.next();
      DFL_CHECK(c.group >= 0 && c.group < kMaxGroups, "pipeline command: micro-batch group ", c.group,
                " out of range");
      c.trims.resize(size_t(r.count()));
      for (SeqTrim& t : c.trims) {
        t.seq = r.next();
        t.length = r.next();
        DFL_CHECK(t.length >= 0, "pipeline command: negative trim length");
      }
      c.segs.resize(size_t(r.count()));
      int64_t rows = 0;
      for (auto& g : c.segs) {
        g.seq = r.next();
        g.n = r.next();
        g.pos0 = r.next();
        const int32_t lm = r.next(), taps = r.next();
        DFL_CHECK(g.n > 0 && g.n <= kMaxCount && g.pos0 >= 0 && lm >= 0 && lm <= 2 && (taps == 0 || taps == 1),
                  "pipeline command: bad segment");
        g.logits = LogitsMode(lm);
        g.taps = taps != 0;
        rows += g.n;
      }
      c.aux.resize(size_t(r.count()));
      for (int32_t& a : c.aux) a = r.next();
      const int32_t nt = r.count();
      DFL_CHECK(nt == rows, "pipeline command: ", nt, " tokens for ", rows, " rows");
      c.tokens.resize(size_t(nt));
      for (int32_t& t : c.tokens) t = r.next();
      break;
    }
    case StageOp::kStop: break;
  }
  DFL_CHECK(r.i == r.n, "pipeline command: ", (r.n - r.i) * 4, " trailing bytes");
  return c;
}

ForwardBatch batch_of(const StepCommand& c) {
  ForwardBatch b;
  b.group = c.group;
  size_t t = 0;
  for (const auto& g : c.segs) {
    SegmentSpec s;
    s.seq = g.seq;
    s.tokens = c.tokens.data() + t;
    s.n = g.n;
    s.pos0 = g.pos0;
    s.logits = g.logits;
    s.taps = g.taps;
    b.segs.push_back(s);
    t += size_t(g.n);
  }
  b.aux = c.aux.empty() ? nullptr : &c.aux;
  return b;
}

std::vector<int32_t> relayed_columns(const std::vector<StageRange>& stages,
                                     const std::vector<int32_t>& aux, int32_t s) {
  std::vector<int32_t> cols;
  for (size_t j = 0; j < aux.size(); ++j)
    if (stage_of_aux(stages, aux[j]) <= s) cols.push_back(int32_t(j));
  return cols;
}

int64_t tap_rows(const ForwardBatch& b) {
  int64_t n = 0;
  for (const SegmentSpec& g : b.segs) n += g.taps ? g.n : 0;
  return n;
}

void pack_activation(const ForwardBatch& b, const float* x, int64_t rows, int32_t H,
                     const std::vector<float>& aux_rows, size_t n_aux,
                     const std::vector<int32_t>& cols, std::vector<float>& msg) {
  const int64_t tr = aux_rows.empty() ? 0 : tap_rows(b);
  msg.resize(size_t(rows + tr * int64_t(cols.size())) * size_t(H));
  std::copy_n(x, size_t(rows) * H, msg.data());
  if (!tr) return;
  float* o = msg.data() + size_t(rows) * H;
  for (int32_t j : cols) {
    int64_t row = 0;
    for (const SegmentSpec& g : b.segs) {
      if (g.taps)
        for (int32_t t = 0; t < g.n; ++t, o += H)
          std::copy_n(aux_rows.data() + (size_t(row + t) * n_aux + size_t(j)) * H, H, o);
      row += g.n;
    }
  }
}

void unpack_taps(const ForwardBatch& b, const float* msg, size_t msg_floats, int64_t rows,
                 int32_t H, size_t n_aux, const std::vector<int32_t>& cols,
                 std::vector<float>& aux_rows) {
  const int64_t tr = aux_rows.empty() ? 0 : tap_rows(b);
  const size_t want = size_t(rows + tr * int64_t(cols.size())) * size_t(H);
  DFL_CHECK(msg_floats == want, "pipeline activation: ", msg_floats * 4, " bytes, the step plan needs ",
            want * 4);
  if (!tr) return;
  const float* in = msg + size_t(rows) * H;
  for (int32_t j : cols) {
    int64_t row = 0;
    for (const SegmentSpec& g : b.segs) {
      if (g.taps)
        for (int32_t t = 0; t < g.n; ++t, in += H)
          std::copy_n(in, H, aux_rows.data() + (size_t(row + t) * n_aux + size_t(j)) * H);
      row += g.n;
    }
  }
}

}  // namespace dfl::dist
