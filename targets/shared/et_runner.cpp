// arrcoc-et-runner: an ExecuTorch program (.pte) run by the runtime's C++ API alone, no Python:
// what an app's native code does. Built for x86-64 and aarch64 by scripts/setup.d/65-executorch-runner.sh
// (targets/shared/et_runner.py drives it).
//
//   arrcoc-et-runner [--threads N] MODEL METHOD OUTDIR REPEAT INPUT...   one request, then exit
//   arrcoc-et-runner [--threads N] --serve                              one request per stdin line
//
// A request is MODEL METHOD OUTDIR REPEAT INPUT... (tab-separated on a --serve line), each INPUT
// "DTYPE:D0xD1x...:PATH" (DTYPE f32, i64, i32 or u8; PATH raw little-endian bytes). The method runs
// once; its outputs go to OUTDIR/out<i>.bin (raw bytes), then REPEAT more calls are timed. Answer:
// one JSON line on stdout, {"outputs": [{"dtype", "shape"}], "load_ms", "first_ms" (the call that
// wrote the outputs), "call_ms": [the timed calls],
// "threads"} or {"error": "..."}. A served process keeps the last program loaded, so the many
// batches of one model cost one load.
#include <executorch/extension/module/module.h>
#include <executorch/extension/tensor/tensor.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

// The wheel ships no threadpool.h: the two members used here, declared as the library defines them.
namespace executorch::extension::threadpool {
class ThreadPool {
 public:
  size_t get_thread_count() const;
  bool _unsafe_reset_threadpool(uint32_t num_threads);
};
ThreadPool* get_threadpool();
}  // namespace executorch::extension::threadpool

using executorch::aten::ScalarType;
using executorch::extension::Module;
using executorch::runtime::EValue;
namespace {

struct DType { const char* name; ScalarType type; size_t bytes; };
const DType kTypes[] = {{"f32", ScalarType::Float, 4}, {"i64", ScalarType::Long, 8},
                        {"i32", ScalarType::Int, 4}, {"u8", ScalarType::Byte, 1}};

const DType* by_name(const std::string& name) {
  for (const auto& t : kTypes) if (name == t.name) return &t;
  return nullptr;
}
const DType* by_type(ScalarType type) {
  for (const auto& t : kTypes) if (type == t.type) return &t;
  return nullptr;
}

struct Input { std::vector<char> data; std::vector<executorch::aten::SizesType> shape; const DType* dtype; };

std::string json_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) >= 0x20) out += c;
  }
  return out;
}

// "f32:1x64x64x3:/path" -> the bytes, checked against the dtype and shape
std::string read_input(const std::string& spec, Input& in) {
  size_t a = spec.find(':'), b = spec.find(':', a + 1);
  if (a == std::string::npos || b == std::string::npos) return "input '" + spec + "' is not DTYPE:SHAPE:PATH";
  in.dtype = by_name(spec.substr(0, a));
  if (!in.dtype) return "unknown dtype in '" + spec + "'";
  size_t count = 1;
  std::stringstream dims(spec.substr(a + 1, b - a - 1));
  for (std::string d; std::getline(dims, d, 'x');) {
    in.shape.push_back(static_cast<executorch::aten::SizesType>(std::atol(d.c_str())));
    count *= in.shape.back();
  }
  std::ifstream f(spec.substr(b + 1), std::ios::binary);
  in.data.assign(std::istreambuf_iterator<char>(f), {});
  if (!f.good() && !f.eof()) return "cannot read " + spec.substr(b + 1);
  if (in.data.size() != count * in.dtype->bytes) return "size of " + spec.substr(b + 1) + " does not match its shape";
  return "";
}

double ms_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
}

std::unique_ptr<Module> module;
std::string module_path;

std::string run(const std::vector<std::string>& req) {
  if (req.size() < 4) return "{\"error\": \"a request is MODEL METHOD OUTDIR REPEAT INPUT...\"}";
  const std::string &path = req[0], &method = req[1], &outdir = req[2];
  int repeat = std::atoi(req[3].c_str());
  std::vector<Input> inputs(req.size() - 4);
  for (size_t i = 4; i < req.size(); ++i) {
    std::string problem = read_input(req[i], inputs[i - 4]);
    if (!problem.empty()) return "{\"error\": \"" + json_escape(problem) + "\"}";
  }
  auto started = std::chrono::steady_clock::now();
  if (!module || module_path != path) {
    module = std::make_unique<Module>(path, Module::LoadMode::File);
    module_path = path;
  }
  auto err = module->load_method(method);
  if (err != executorch::runtime::Error::Ok) {
    module.reset();
    return "{\"error\": \"load_method " + json_escape(method) + " failed: error 0x" +
           std::to_string(static_cast<int>(err)) + "\"}";
  }
  double load_ms = ms_since(started);
  std::vector<executorch::extension::TensorPtr> tensors;
  std::vector<EValue> values;
  for (auto& in : inputs) {
    tensors.push_back(executorch::extension::from_blob(in.data.data(), in.shape, in.dtype->type));
    values.emplace_back(*tensors.back());
  }
  auto first = std::chrono::steady_clock::now();
  auto result = module->execute(method, values);
  double first_ms = ms_since(first);
  if (!result.ok()) return "{\"error\": \"execute failed: error " + std::to_string(static_cast<int>(result.error())) + "\"}";
  std::ostringstream out;
  out << "{\"outputs\": [";
  for (size_t i = 0; i < result->size(); ++i) {
    const auto& t = (*result)[i].toTensor();
    const DType* dtype = by_type(t.scalar_type());
    if (!dtype) return "{\"error\": \"output " + std::to_string(i) + " has an unsupported dtype\"}";
    std::ofstream f(outdir + "/out" + std::to_string(i) + ".bin", std::ios::binary);
    f.write(static_cast<const char*>(t.const_data_ptr()), t.nbytes());
    if (!f) return "{\"error\": \"cannot write " + json_escape(outdir) + "\"}";
    out << (i ? ", " : "") << "{\"dtype\": \"" << dtype->name << "\", \"shape\": [";
    for (ssize_t d = 0; d < t.dim(); ++d) out << (d ? ", " : "") << t.size(d);
    out << "]}";
  }
  out << "], \"load_ms\": " << load_ms << ", \"first_ms\": " << first_ms << ", \"call_ms\": [";
  for (int r = 0; r < repeat; ++r) {
    auto t = std::chrono::steady_clock::now();
    auto again = module->execute(method, values);
    if (!again.ok()) return "{\"error\": \"execute failed on a timed call\"}";
    out << (r ? ", " : "") << ms_since(t);
  }
  out << "], \"threads\": " << executorch::extension::threadpool::get_threadpool()->get_thread_count() << "}";
  return out.str();
}

std::vector<std::string> split(const std::string& line, char sep) {
  std::vector<std::string> parts;
  std::stringstream s(line);
  for (std::string part; std::getline(s, part, sep);) parts.push_back(part);
  return parts;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.size() >= 2 && args[0] == "--threads") {
    // sized once, before any program is loaded (resizing a pool in use corrupted the heap)
    executorch::extension::threadpool::get_threadpool()->_unsafe_reset_threadpool(std::atoi(args[1].c_str()));
    args.erase(args.begin(), args.begin() + 2);
  }
  if (args.size() == 1 && args[0] == "--serve") {
    for (std::string line; std::getline(std::cin, line);) std::cout << run(split(line, '\t')) << std::endl;
    return 0;
  }
  std::string answer = run(args);
  std::cout << answer << std::endl;
  return answer.rfind("{\"error\"", 0) == 0 ? 1 : 0;
}
