// The whitelisted pickle VM behind read_torch_file(). Values live in an arena and reference each
// other by raw pointer while unpickling (pickle shares and mutates objects through the memo, and a
// hostile stream can build cycles); the result is then copied out into an owned PtValue tree under
// depth and size budgets, which also turns a cycle into an error instead of a leak or a hang.
#include "io/torch_pickle.h"

#include <cstring>
#include <map>
#include <unordered_map>

#include "core/error.h"
#include "io/torch_tensor.h"
#include "io/utf8.h"

namespace dfl {

namespace {

enum class G : uint8_t {  // allowed globals
  kRebuildV2,
  kRebuildV3,
  kRebuildParameter,
  kTypedStorage,  // dtype in Obj::dtype
  kUntypedStorage,
  kDType,  // a torch.<dtype> object; dtype in Obj::dtype
  kOrderedDict,
};

struct Obj {
  enum class K : uint8_t {
    kNone,
    kBool,
    kInt,
    kFloat,
    kString,
    kList,
    kTuple,
    kDict,
    kTensor,
    kGlobal,
    kStorage
  };
  K kind = K::kNone;
  G global = G::kOrderedDict;
  DType dtype = DType::kU8;  // kGlobal (storage/dtype), kStorage (element type)
  bool b = false;
  int64_t i = 0;
  double f = 0;
  std::string s;                             // kString; kGlobal: dotted name
  std::vector<Obj*> items;                   // kList, kTuple
  std::vector<std::pair<Obj*, Obj*>> dict;   // kDict
  std::shared_ptr<const PtTensor> tensor;    // kTensor
  std::shared_ptr<const std::string> bytes;  // kStorage
  bool untyped = false;                      // kStorage
};

struct GlobalDef {
  const char* name;
  G g;
  DType dtype;
};
constexpr GlobalDef kGlobals[] = {
    {"torch._utils._rebuild_tensor_v2", G::kRebuildV2, DType::kU8},
    {"torch._utils._rebuild_tensor_v3", G::kRebuildV3, DType::kU8},
    {"torch._utils._rebuild_parameter", G::kRebuildParameter, DType::kU8},
    {"collections.OrderedDict", G::kOrderedDict, DType::kU8},
    {"torch.storage.UntypedStorage", G::kUntypedStorage, DType::kU8},
    {"torch.FloatStorage", G::kTypedStorage, DType::kF32},
    {"torch.DoubleStorage", G::kTypedStorage, DType::kF64},
    {"torch.HalfStorage", G::kTypedStorage, DType::kF16},
    {"torch.BFloat16Storage", G::kTypedStorage, DType::kBF16},
    {"torch.LongStorage", G::kTypedStorage, DType::kI64},
    {"torch.IntStorage", G::kTypedStorage, DType::kI32},
    {"torch.ShortStorage", G::kTypedStorage, DType::kI16},
    {"torch.CharStorage", G::kTypedStorage, DType::kI8},
    {"torch.ByteStorage", G::kTypedStorage, DType::kU8},
    {"torch.BoolStorage", G::kTypedStorage, DType::kBool},
    {"torch.float32", G::kDType, DType::kF32},
    {"torch.float64", G::kDType, DType::kF64},
    {"torch.float16", G::kDType, DType::kF16},
    {"torch.bfloat16", G::kDType, DType::kBF16},
    {"torch.float8_e4m3fn", G::kDType, DType::kF8E4M3},
    {"torch.float8_e5m2", G::kDType, DType::kF8E5M2},
    {"torch.int64", G::kDType, DType::kI64},
    {"torch.int32", G::kDType, DType::kI32},
    {"torch.int16", G::kDType, DType::kI16},
    {"torch.int8", G::kDType, DType::kI8},
    {"torch.uint8", G::kDType, DType::kU8},
    {"torch.bool", G::kDType, DType::kBool},
};

const char* kind_name(Obj::K k) {
  static const char* kNames[] = {"None",  "bool", "int",    "float",  "str",    "list",
                                 "tuple", "dict", "tensor", "global", "storage"};
  return kNames[static_cast<int>(k)];
}

class Vm {
 public:
  Vm(std::string_view pkl, const std::string& origin, StorageLoader loader, void* ctx,
     const PtReadLimits& limits)
      : p_(pkl), origin_(origin), loader_(loader), ctx_(ctx), limits_(limits) {}

  PtValue run() {
    Obj* result = execute();
    uint64_t nodes = 0, str_bytes = 0;
    return materialize(result, 0, &nodes, &str_bytes);
  }

 private:
  template <typename... Args>
  [[noreturn]] void fail(const Args&... parts) const {
    throw Error(str("'", origin_, "': data.pkl at byte ", op_pos_, ": ", parts...));
  }

  // ---- reading the stream ----
  const uint8_t* take(uint64_t n) {
    if (n > p_.size() - pos_) fail("stream ends inside an opcode argument (truncated file?)");
    const auto* r = reinterpret_cast<const uint8_t*>(p_.data()) + pos_;
    pos_ += static_cast<size_t>(n);
    return r;
  }
  uint64_t take_le(int n) {
    const uint8_t* b = take(static_cast<uint64_t>(n));
    uint64_t v = 0;
    for (int k = n - 1; k >= 0; --k) v = (v << 8) | b[k];
    return v;
  }
  std::string take_line() {
    const size_t start = pos_;
    while (pos_ < p_.size() && p_[pos_] != '\n') {
      if (pos_ - start > 256) fail("GLOBAL name longer than 256 bytes");
      ++pos_;
    }
    if (pos_ >= p_.size()) fail("stream ends inside a GLOBAL name (truncated file?)");
    return std::string(p_.substr(start, pos_++ - start));
  }

  // ---- objects ----
  Obj* make(Obj::K k) {
    if (arena_.size() >= limits_.max_objects)
      fail("more than ", limits_.max_objects, " objects; refusing to continue");
    arena_.push_back(std::make_unique<Obj>());
    arena_.back()->kind = k;
    return arena_.back().get();
  }
  Obj* make_int(int64_t v) {
    Obj* o = make(Obj::K::kInt);
    o->i = v;
    return o;
  }
  void push(Obj* o) { stack_.push_back(o); }
  size_t floor() const { return marks_.empty() ? 0 : marks_.back(); }
  Obj* pop() {
    if (stack_.size() <= floor()) fail("stack underflow");
    Obj* o = stack_.back();
    stack_.pop_back();
    return o;
  }
  Obj* top() {
    if (stack_.size() <= floor()) fail("stack underflow");
    return stack_.back();
  }
  std::vector<Obj*> pop_mark() {
    if (marks_.empty()) fail("no MARK on the stack");
    const size_t m = marks_.back();
    marks_.pop_back();
    std::vector<Obj*> out(stack_.begin() + static_cast<std::ptrdiff_t>(m), stack_.end());
    stack_.resize(m);
    return out;
  }
  Obj* expect(Obj* o, Obj::K k, const char* what) {
    if (o->kind != k) fail(what, " must be a ", kind_name(k), ", got ", kind_name(o->kind));
    return o;
  }
  void memo_put(uint64_t idx) {
    if (memo_.size() >= limits_.max_objects) fail("memo too large");
    memo_[idx] = top();
  }
  Obj* memo_get(uint64_t idx) {
    auto it = memo_.find(idx);
    if (it == memo_.end()) fail("memo index ", idx, " was never stored");
    return it->second;
  }
  // Duplicate keys (torch never writes them) are kept as separate entries rather than merged:
  // merging would compare keys, and a hostile stream can make every comparison cost megabytes.
  void set_item(Obj* d, Obj* k, Obj* v) {
    expect(d, Obj::K::kDict, "SETITEM target");
    if (k->kind != Obj::K::kString && k->kind != Obj::K::kInt)
      fail("dict keys must be str or int, got ", kind_name(k->kind));
    d->dict.emplace_back(k, v);
  }

  Obj* resolve_global(const std::string& module, const std::string& name) {
    const std::string full = module + "." + name;
    for (const auto& g : kGlobals) {
      if (full == g.name) {
        Obj* o = make(Obj::K::kGlobal);
        o->global = g.g;
        o->dtype = g.dtype;
        o->s = full;
        return o;
      }
    }
    std::string shown;
    for (char c : full) shown += (c >= 0x20 && c < 0x7f) ? c : '?';
    fail("refused: pickle global '", shown, "' is not allowed");
  }

  Obj* persistent_load(Obj* pid);
  Obj* call(Obj* fn, Obj* args);
  Obj* rebuild_tensor(const std::vector<Obj*>& a, DType dtype);
  Obj* execute();
  PtValue materialize(const Obj* o, int depth, uint64_t* nodes, uint64_t* str_bytes);

  std::string_view p_;
  size_t pos_ = 0, op_pos_ = 0;
  const std::string& origin_;
  StorageLoader loader_;
  void* ctx_;
  PtReadLimits limits_;
  std::vector<std::unique_ptr<Obj>> arena_;
  std::vector<Obj*> stack_;
  std::vector<size_t> marks_;
  std::unordered_map<uint64_t, Obj*> memo_;
  std::map<std::string, std::shared_ptr<const std::string>> storages_;
  uint64_t storage_bytes_ = 0, tensor_bytes_ = 0;
};

Obj* Vm::persistent_load(Obj* pid) {
  expect(pid, Obj::K::kTuple, "persistent id");
  const auto& t = pid->items;
  if (t.size() != 5 || t[0]->kind != Obj::K::kString || t[0]->s != "storage")
    fail("persistent id must be ('storage', type, key, location, numel)");
  Obj* type = expect(t[1], Obj::K::kGlobal, "storage type");
  if (type->global != G::kTypedStorage && type->global != G::kUntypedStorage)
    fail("persistent id names '", type->s, "', which is not a storage type");
  const std::string& key = expect(t[2], Obj::K::kString, "storage key")->s;
  if (key.empty() || key.size() > 64 || key.find('/') != std::string::npos ||
      key.find('\0') != std::string::npos || key == "." || key == "..")
    fail("storage key '", key.substr(0, 64), "' is not a plain name");
  expect(t[3], Obj::K::kString, "storage location");
  const int64_t numel = expect(t[4], Obj::K::kInt, "storage numel")->i;
  if (numel < 0) fail("storage numel ", numel, " is negative");

  auto it = storages_.find(key);
  if (it == storages_.end()) {
    const uint64_t left = limits_.max_total_tensor_bytes - storage_bytes_;
    auto bytes = std::make_shared<const std::string>(loader_(ctx_, key, left));
    if (bytes->size() > left) fail("storage '", key, "' exceeds the size limit");
    storage_bytes_ += bytes->size();
    it = storages_.emplace(key, std::move(bytes)).first;
  }
  Obj* s = make(Obj::K::kStorage);
  s->untyped = type->global == G::kUntypedStorage;
  s->dtype = s->untyped ? DType::kU8 : type->dtype;
  s->bytes = it->second;
  const uint64_t need =
      static_cast<uint64_t>(numel) * dtype_size(s->dtype);  // numel < 2^63, size <= 8
  if (need / dtype_size(s->dtype) != static_cast<uint64_t>(numel) || need > s->bytes->size())
    fail("storage '", key, "' declares ", numel, " elements of ", dtype_name(s->dtype),
         " but holds ", s->bytes->size(), " bytes");
  return s;
}

Obj* Vm::rebuild_tensor(const std::vector<Obj*>& a, DType dtype) {
  Obj* st = expect(a[0], Obj::K::kStorage, "tensor storage");
  const int64_t offset = expect(a[1], Obj::K::kInt, "storage_offset")->i;
  Obj* size = expect(a[2], Obj::K::kTuple, "tensor size");
  Obj* stride = expect(a[3], Obj::K::kTuple, "tensor stride");
  if (size->items.size() != stride->items.size())
    fail("tensor size has ", size->items.size(), " dims but stride has ", stride->items.size());
  std::vector<int64_t> shape, strides;
  for (Obj* d : size->items) shape.push_back(expect(d, Obj::K::kInt, "size entry")->i);
  for (Obj* d : stride->items) strides.push_back(expect(d, Obj::K::kInt, "stride entry")->i);
  if (!st->untyped && st->dtype != dtype)
    fail("tensor dtype ", dtype_name(dtype), " does not match its ", dtype_name(st->dtype),
         " storage");
  std::string why;
  auto t = std::make_shared<PtTensor>();
  if (!copy_strided(*st->bytes, dtype, offset, shape, strides,
                    limits_.max_total_tensor_bytes - tensor_bytes_, t.get(), &why))
    fail(why);
  tensor_bytes_ += t->data.size();
  Obj* o = make(Obj::K::kTensor);
  o->tensor = std::move(t);
  return o;
}

Obj* Vm::call(Obj* fn, Obj* args) {
  expect(fn, Obj::K::kGlobal, "REDUCE callable");
  expect(args, Obj::K::kTuple, "REDUCE arguments");
  const auto& a = args->items;
  switch (fn->global) {
    case G::kOrderedDict:
      if (!a.empty()) fail("collections.OrderedDict called with arguments");
      return make(Obj::K::kDict);
    case G::kRebuildV2:
      if (a.size() != 6 && a.size() != 7)
        fail("_rebuild_tensor_v2 takes 6 or 7 arguments, got ", a.size());
      return rebuild_tensor(a, expect(a[0], Obj::K::kStorage, "tensor storage")->dtype);
    case G::kRebuildV3: {
      if (a.size() != 7 && a.size() != 8)
        fail("_rebuild_tensor_v3 takes 7 or 8 arguments, got ", a.size());
      Obj* dt = expect(a[6], Obj::K::kGlobal, "tensor dtype");
      if (dt->global != G::kDType) fail("'", dt->s, "' is not a dtype");
      return rebuild_tensor(a, dt->dtype);
    }
    case G::kRebuildParameter:
      if (a.size() != 3) fail("_rebuild_parameter takes 3 arguments, got ", a.size());
      return expect(a[0], Obj::K::kTensor, "parameter data");
    default:
      fail("'", fn->s, "' cannot be called");
  }
}

Obj* Vm::execute() {
  if (p_.size() > limits_.max_pickle_bytes) fail("data.pkl larger than ", limits_.max_pickle_bytes);
  while (true) {
    op_pos_ = pos_;
    if (pos_ >= p_.size()) fail("stream ends without STOP (truncated file?)");
    const uint8_t op = *take(1);
    switch (op) {
      case 0x80: {  // PROTO
        const uint8_t v = *take(1);
        if (v > 5) fail("pickle protocol ", int(v), " is not supported");
        break;
      }
      case 0x95:
        take(8);
        break;     // FRAME: a size hint only
      case '.': {  // STOP
        Obj* r = pop();
        return r;
      }
      case '(':  // MARK
        if (marks_.size() >= 4096) fail("too many nested MARKs");
        marks_.push_back(stack_.size());
        break;
      case '0':
        pop();
        break;  // POP
      case '1':
        pop_mark();
        break;  // POP_MARK
      case '2':
        push(top());
        break;  // DUP
      case 'N':
        push(make(Obj::K::kNone));
        break;
      case 0x88:
      case 0x89: {  // NEWTRUE / NEWFALSE
        Obj* o = make(Obj::K::kBool);
        o->b = op == 0x88;
        push(o);
        break;
      }
      case 'J':
        push(make_int(static_cast<int32_t>(static_cast<uint32_t>(take_le(4)))));
        break;
      case 'K':
        push(make_int(static_cast<int64_t>(take_le(1))));
        break;
      case 'M':
        push(make_int(static_cast<int64_t>(take_le(2))));
        break;
      case 0x8a:    // LONG1
      case 0x8b: {  // LONG4
        const uint64_t n = op == 0x8a ? take_le(1) : take_le(4);
        if (n > 8) fail("integer of ", n, " bytes does not fit in 64 bits");
        uint64_t v = n ? take_le(static_cast<int>(n)) : 0;
        if (n > 0 && n < 8 && (v >> (8 * n - 1)) & 1) v |= ~0ull << (8 * n);  // sign-extend
        push(make_int(static_cast<int64_t>(v)));
        break;
      }
      case 'G': {  // BINFLOAT, big-endian
        const uint8_t* b = take(8);
        uint64_t u = 0;
        for (int k = 0; k < 8; ++k) u = (u << 8) | b[k];
        Obj* o = make(Obj::K::kFloat);
        std::memcpy(&o->f, &u, 8);
        push(o);
        break;
      }
      case 'X':
      case 0x8c:
      case 0x8d: {  // BINUNICODE / SHORT_BINUNICODE / BINUNICODE8
        const uint64_t n = take_le(op == 'X' ? 4 : op == 0x8c ? 1 : 8);
        const uint8_t* b = take(n);
        Obj* o = make(Obj::K::kString);
        o->s.assign(reinterpret_cast<const char*>(b), static_cast<size_t>(n));
        if (!is_valid_utf8(o->s)) fail("string is not valid UTF-8");
        push(o);
        break;
      }
      case '}':
        push(make(Obj::K::kDict));
        break;
      case ']':
        push(make(Obj::K::kList));
        break;
      case ')':
        push(make(Obj::K::kTuple));
        break;
      case 't':
      case 'l': {  // TUPLE / LIST
        auto items = pop_mark();
        Obj* o = make(op == 't' ? Obj::K::kTuple : Obj::K::kList);
        o->items = std::move(items);
        push(o);
        break;
      }
      case 0x85:
      case 0x86:
      case 0x87: {  // TUPLE1..3
        const int n = op - 0x84;
        Obj* o = make(Obj::K::kTuple);
        o->items.resize(static_cast<size_t>(n));
        for (int k = n - 1; k >= 0; --k) o->items[static_cast<size_t>(k)] = pop();
        push(o);
        break;
      }
      case 'd': {  // DICT
        auto items = pop_mark();
        if (items.size() % 2) fail("DICT with an odd number of items");
        Obj* o = make(Obj::K::kDict);
        for (size_t k = 0; k < items.size(); k += 2) set_item(o, items[k], items[k + 1]);
        push(o);
        break;
      }
      case 's': {  // SETITEM
        Obj* v = pop();
        Obj* k = pop();
        set_item(top(), k, v);
        break;
      }
      case 'u': {  // SETITEMS
        auto items = pop_mark();
        if (items.size() % 2) fail("SETITEMS with an odd number of items");
        Obj* d = top();
        for (size_t k = 0; k < items.size(); k += 2) set_item(d, items[k], items[k + 1]);
        break;
      }
      case 'a': {  // APPEND
        Obj* v = pop();
        expect(top(), Obj::K::kList, "APPEND target")->items.push_back(v);
        break;
      }
      case 'e': {  // APPENDS
        auto items = pop_mark();
        auto& dst = expect(top(), Obj::K::kList, "APPENDS target")->items;
        dst.insert(dst.end(), items.begin(), items.end());
        break;
      }
      case 'q':
        memo_put(take_le(1));
        break;  // BINPUT
      case 'r':
        memo_put(take_le(4));
        break;  // LONG_BINPUT
      case 0x94:
        memo_put(memo_.size());
        break;  // MEMOIZE
      case 'h':
        push(memo_get(take_le(1)));
        break;  // BINGET
      case 'j':
        push(memo_get(take_le(4)));
        break;     // LONG_BINGET
      case 'c': {  // GLOBAL
        std::string module = take_line();
        std::string name = take_line();
        push(resolve_global(module, name));
        break;
      }
      case 0x93: {  // STACK_GLOBAL
        Obj* name = expect(pop(), Obj::K::kString, "STACK_GLOBAL name");
        Obj* module = expect(pop(), Obj::K::kString, "STACK_GLOBAL module");
        push(resolve_global(module->s, name->s));
        break;
      }
      case 'R': {  // REDUCE
        Obj* args = pop();
        Obj* fn = pop();
        push(call(fn, args));
        break;
      }
      case 'b': {  // BUILD: only attribute state on dicts (state_dict()._metadata), ignored
        Obj* state = pop();
        Obj* inst = top();
        if (inst->kind != Obj::K::kDict)
          fail("BUILD on a ", kind_name(inst->kind), " is not allowed");
        if (state->kind != Obj::K::kDict && state->kind != Obj::K::kNone &&
            state->kind != Obj::K::kTuple)
          fail("BUILD state must be a dict, got ", kind_name(state->kind));
        break;
      }
      case 'Q':
        push(persistent_load(pop()));
        break;  // BINPERSID
      default: {
        static const char* kHex = "0123456789abcdef";
        const char hex[] = {'0', 'x', kHex[op >> 4], kHex[op & 15], 0};
        fail("refused: pickle opcode ", hex, " is not supported");
      }
    }
  }
}

PtValue Vm::materialize(const Obj* o, int depth, uint64_t* nodes, uint64_t* str_bytes) {
  if (depth > limits_.max_depth)
    fail("result nests deeper than ", limits_.max_depth, " levels (or is cyclic)");
  if (++*nodes > limits_.max_objects) fail("result has more than ", limits_.max_objects, " values");
  PtValue v;
  switch (o->kind) {
    case Obj::K::kNone:
      v.kind = PtValue::Kind::kNone;
      break;
    case Obj::K::kBool:
      v.kind = PtValue::Kind::kBool;
      v.b = o->b;
      break;
    case Obj::K::kInt:
      v.kind = PtValue::Kind::kInt;
      v.i = o->i;
      break;
    case Obj::K::kFloat:
      v.kind = PtValue::Kind::kFloat;
      v.f = o->f;
      break;
    case Obj::K::kString:
      *str_bytes += o->s.size();
      if (*str_bytes > limits_.max_pickle_bytes) fail("result strings exceed the size limit");
      v.kind = PtValue::Kind::kString;
      v.s = o->s;
      break;
    case Obj::K::kList:
    case Obj::K::kTuple:
      v.kind = o->kind == Obj::K::kList ? PtValue::Kind::kList : PtValue::Kind::kTuple;
      v.items.reserve(o->items.size());
      for (const Obj* c : o->items) v.items.push_back(materialize(c, depth + 1, nodes, str_bytes));
      break;
    case Obj::K::kDict:
      v.kind = PtValue::Kind::kDict;
      v.dict.reserve(o->dict.size());
      for (const auto& [k, x] : o->dict)
        v.dict.push_back({materialize(k, depth + 1, nodes, str_bytes),
                          materialize(x, depth + 1, nodes, str_bytes)});
      break;
    case Obj::K::kTensor:
      v.kind = PtValue::Kind::kTensor;
      v.tensor = o->tensor;
      break;
    case Obj::K::kGlobal:
      if (o->global != G::kDType) fail("result holds the callable '", o->s, "'");
      v.kind = PtValue::Kind::kString;  // a saved torch.dtype reads back as its name
      v.s = o->s;
      break;
    case Obj::K::kStorage:
      fail("result holds a bare storage (only tensors are supported)");
  }
  return v;
}

}  // namespace

PtValue unpickle_torch(std::string_view pkl, const std::string& origin, StorageLoader load_storage,
                       void* ctx, const PtReadLimits& limits) {
  Vm vm(pkl, origin, load_storage, ctx, limits);
  return vm.run();
}

}  // namespace dfl
