// Hugging Face config.json → ModelSpec (the shape and how the family's layers are written), and `--model
// NAME|PATH` resolution: the table, a config file or model folder, a TOML model file, a Hub id in the local
// Hugging Face cache.
#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "plan/plan.h"
#include "util/json_in.h"
#include "util/units.h"

namespace gm::plan {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char* kFamilies =
    "gpt2, llama, mistral, qwen2, qwen3, gemma2, gemma3, gemma3_text, phi3, mixtral, qwen2_moe, qwen3_moe, "
    "deepseek_v3, gpt_oss";

/// Reads typed fields of one config object; errors name the file, the key and the model_type.
class Fields {
 public:
  Fields(const json& cfg, std::string_view origin, std::string type)
      : cfg_(cfg), origin_(origin), type_(std::move(type)) {}

  const std::string& type() const { return type_; }

  /// A number that may be absent or null.
  Result<std::optional<double>> maybe(const char* key) const {
    auto it = cfg_.find(key);
    if (it == cfg_.end() || it->is_null()) return std::optional<double>();
    if (it->is_boolean() || !it->is_number())
      return make_error(ErrorKind::usage,
                        fmt::format("{}: '{}' must be a number, not {}", origin_, key, it->dump()));
    const double v = util::json_number(&*it).value_or(-1);
    if (!(v >= 0) || v > 1e15)
      return make_error(ErrorKind::usage, fmt::format("{}: '{}' must be a non-negative number, not {}",
                                                      origin_, key, it->dump()));
    return std::optional<double>(v);
  }
  Result<double> number(const char* key) const {
    GM_TRY(auto v, maybe(key));
    if (!v)
      return make_error(ErrorKind::usage,
                        fmt::format("{}: missing '{}' (needed for model_type {})", origin_, key, type_));
    return *v;
  }
  Result<double> number_or(const char* key, double fallback) const {
    GM_TRY(auto v, maybe(key));
    return v.value_or(fallback);
  }
  Result<int> integer(const char* key) const {
    GM_TRY(double v, number(key));
    return whole(key, v);
  }
  Result<int> integer_or(const char* key, int fallback) const {
    GM_TRY(auto v, maybe(key));
    if (!v) return fallback;
    return whole(key, *v);
  }
  Result<bool> flag_or(const char* key, bool fallback) const {
    auto it = cfg_.find(key);
    if (it == cfg_.end() || it->is_null()) return fallback;
    if (!it->is_boolean())
      return make_error(ErrorKind::usage,
                        fmt::format("{}: '{}' must be true or false, not {}", origin_, key, it->dump()));
    return util::json_bool(&*it).value_or(fallback);
  }
  std::string text_or(const char* key, std::string fallback) const {
    return util::json_string(cfg_, key).value_or(std::move(fallback));
  }
  /// Length of an array field (absent: 0).
  std::size_t array_size(const char* key) const {
    auto it = cfg_.find(key);
    return it != cfg_.end() && it->is_array() ? it->size() : 0;
  }

 private:
  Result<int> whole(const char* key, double v) const {
    if (v != static_cast<double>(static_cast<long long>(v)) || v > 1e8)
      return make_error(ErrorKind::usage,
                        fmt::format("{}: '{}' must be a whole number up to 100,000,000", origin_, key));
    return static_cast<int>(v);
  }
  const json& cfg_;
  std::string origin_;
  std::string type_;
};

bool llama_like(std::string_view t) {
  return t == "llama" || t == "mistral" || t == "qwen2" || t == "qwen3" || t == "gemma2" ||
         t == "gemma3_text" || t == "phi3" || t == "mixtral" || t == "qwen2_moe" || t == "qwen3_moe" ||
         t == "deepseek_v3" || t == "gpt_oss";
}

Result<ModelSpec> parse_gpt2(const Fields& f) {
  ModelSpec m;
  GM_TRY(m.hidden, f.integer("n_embd"));
  GM_TRY(m.layers, f.integer("n_layer"));
  GM_TRY(m.heads, f.integer("n_head"));
  GM_TRY(m.vocab, f.integer("vocab_size"));
  GM_TRY(m.seq, f.integer_or("n_positions", 1024));
  GM_TRY(m.ffn, f.integer_or("n_inner", 4 * m.hidden));
  GM_TRY(m.tied_embeddings, f.flag_or("tie_word_embeddings", true));
  m.kv_heads = m.heads;
  m.gated_mlp = false;
  m.impl = family_implementation("gpt2", false);
  const std::string act = f.text_or("activation_function", "gelu_new");
  m.impl.mlp = act == "gelu_new" || act == "gelu_fast" ? MlpActivation::gelu_python : MlpActivation::gelu;
  GM_TRY(m.impl.attention_dropout, f.number_or("attn_pdrop", 0.1));
  GM_TRY(m.impl.hidden_dropout, f.number_or("resid_pdrop", 0.1));
  GM_TRY(m.impl.embedding_dropout, f.number_or("embd_pdrop", 0.1));
  return m;
}

Result<ModelSpec> parse_llama_like(const Fields& f) {
  const std::string& t = f.type();
  const bool gemma3 = t == "gemma3_text";
  ModelSpec m;
  m.gated_mlp = true;
  // Gemma 3's multimodal configs leave out what Gemma3TextConfig defaults (transformers fills it in).
  GM_TRY(m.hidden, gemma3 ? f.integer_or("hidden_size", 2304) : f.integer("hidden_size"));
  GM_TRY(m.layers, gemma3 ? f.integer_or("num_hidden_layers", 26) : f.integer("num_hidden_layers"));
  GM_TRY(m.heads, gemma3 ? f.integer_or("num_attention_heads", 8) : f.integer("num_attention_heads"));
  GM_TRY(m.ffn, gemma3 ? f.integer_or("intermediate_size", 9216) : f.integer("intermediate_size"));
  GM_TRY(m.vocab, gemma3 ? f.integer_or("vocab_size", 262208) : f.integer("vocab_size"));
  GM_TRY(m.kv_heads, f.integer_or("num_key_value_heads", gemma3 ? 4 : m.heads));
  GM_TRY(m.head_size, f.integer_or("head_dim", gemma3 || t == "gemma2" ? 256 : 0));
  if (m.heads > 0 && m.head_size == m.hidden / m.heads && m.hidden % m.heads == 0) m.head_size = 0;
  GM_TRY(m.seq, f.integer_or("max_position_embeddings", gemma3 ? 131072 : 0));
  const bool gemma = t == "gemma2" || gemma3;
  GM_TRY(m.tied_embeddings, f.flag_or("tie_word_embeddings", gemma));
  GM_TRY(bool attention_bias, f.flag_or("attention_bias", t == "gpt_oss"));
  m.qkv_bias = attention_bias || t == "qwen2" || t == "qwen2_moe";
  m.o_bias = attention_bias;
  m.qk_norm = t == "qwen3" || t == "qwen3_moe" || gemma3;
  m.impl = family_implementation(t, true);
  GM_TRY(m.impl.attention_dropout, f.number_or("attention_dropout", 0.0));

  if (t == "mixtral") {
    GM_TRY(m.experts, f.integer("num_local_experts"));
    GM_TRY(m.experts_per_token, f.integer("num_experts_per_tok"));
  } else if (t == "qwen2_moe" || t == "qwen3_moe") {
    GM_TRY(m.experts, f.integer("num_experts"));
    GM_TRY(m.experts_per_token, f.integer("num_experts_per_tok"));
    m.dense_ffn = m.ffn;
    GM_TRY(m.ffn, f.integer("moe_intermediate_size"));
    if (t == "qwen2_moe") {
      GM_TRY(m.shared_ffn, f.integer("shared_expert_intermediate_size"));
    }
    GM_TRY(int step, f.integer_or("decoder_sparse_step", 1));
    const int sparse = step > 0 ? m.layers / step : 0;
    m.dense_layers = std::max(m.layers - sparse, static_cast<int>(f.array_size("mlp_only_layers")));
  } else if (t == "deepseek_v3") {
    GM_TRY(m.experts, f.integer("n_routed_experts"));
    GM_TRY(m.experts_per_token, f.integer("num_experts_per_tok"));
    GM_TRY(int shared, f.integer_or("n_shared_experts", 0));
    m.dense_ffn = m.ffn;
    GM_TRY(m.ffn, f.integer("moe_intermediate_size"));
    if (static_cast<long long>(shared) * m.ffn > 100'000'000)
      return make_error(ErrorKind::usage, "n_shared_experts × moe_intermediate_size is too large");
    m.shared_ffn = shared * m.ffn;
    GM_TRY(m.dense_layers, f.integer_or("first_k_dense_replace", 0));
    GM_TRY(m.q_lora_rank, f.integer_or("q_lora_rank", 0));
    GM_TRY(m.kv_lora_rank, f.integer("kv_lora_rank"));
    GM_TRY(m.rope_head_dim, f.integer("qk_rope_head_dim"));
    GM_TRY(int nope, f.integer("qk_nope_head_dim"));
    GM_TRY(m.v_head_dim, f.integer("v_head_dim"));
    m.head_size = nope + m.rope_head_dim;
    m.kv_heads = m.heads;  // every head gets its own decompressed key and value
  } else if (t == "gpt_oss") {
    GM_TRY(m.experts, f.integer("num_local_experts"));
    GM_TRY(auto k, f.maybe("num_experts_per_tok"));
    if (!k) {
      GM_TRY(k, f.maybe("experts_per_token"));
    }
    if (!k) return f.integer("num_experts_per_tok").error();
    m.experts_per_token = static_cast<int>(*k);
    m.attention_sinks = true;
    m.moe_biases = true;
  }
  return m;
}

std::string file_text(const std::string& path, bool& ok) {
  std::ifstream in(path, std::ios::binary);
  ok = static_cast<bool>(in);
  std::stringstream buf;
  if (ok) buf << in.rdbuf();
  return buf.str();
}

/// The snapshot config.json of a Hub id in one cache folder: the one refs/main names, else the first.
std::optional<std::string> cached_config(const fs::path& cache, const std::string& repo_dir) {
  std::error_code ec;
  const fs::path repo = cache / repo_dir;
  if (!fs::is_directory(repo / "snapshots", ec)) return std::nullopt;
  bool ok = false;
  std::string ref = std::string(util::trim(file_text((repo / "refs" / "main").string(), ok)));
  if (ok && !ref.empty() && fs::is_regular_file(repo / "snapshots" / ref / "config.json", ec))
    return (repo / "snapshots" / ref / "config.json").string();
  std::vector<std::string> found;
  for (const auto& entry : fs::directory_iterator(repo / "snapshots", ec))
    if (fs::is_regular_file(entry.path() / "config.json", ec))
      found.push_back((entry.path() / "config.json").string());
  if (found.empty()) return std::nullopt;
  std::sort(found.begin(), found.end());
  return found.front();
}

}  // namespace

Result<ModelSpec> parse_hf_config(std::string_view text, std::string_view origin, std::string_view name) {
  const json root = json::parse(text, nullptr, false);
  if (root.is_discarded() || !root.is_object())
    return make_error(ErrorKind::usage,
                      fmt::format("{}: not a JSON object (a Hugging Face config.json)", origin));
  const json* cfg = &root;
  std::string type;
  if (auto t = util::json_string(root, "model_type")) type = *t;
  // Multimodal wrappers (Gemma 3, Mistral 3) keep the language model's fields in text_config.
  if (auto tc = root.find("text_config"); tc != root.end() && tc->is_object()) {
    cfg = &*tc;
    if (auto t = util::json_string(*tc, "model_type"))
      type = *t;
    else if (type == "gemma3")
      type = "gemma3_text";
  }
  if (type.empty())
    return make_error(ErrorKind::usage,
                      fmt::format("{}: missing 'model_type' (one of {})", origin, kFamilies));
  if (type == "gemma3") type = "gemma3_text";
  const Fields f(*cfg, origin, type);
  ModelSpec m;
  if (type == "gpt2") {
    GM_TRY(m, parse_gpt2(f));
  } else if (llama_like(type)) {
    GM_TRY(m, parse_llama_like(f));
  } else {
    return make_error(
        ErrorKind::usage,
        fmt::format("{}: model_type '{}' is not one gpumeter plans (it reads {})", origin, type, kFamilies));
  }
  m.family = type;
  m.arch = Arch::decoder;
  m.name = name.empty() ? std::string("custom") : std::string(name);
  m.source = fmt::format("Hugging Face config {}", origin);
  if (m.heads <= 0 || m.hidden <= 0 || m.layers <= 0 || m.ffn <= 0)
    return make_error(
        ErrorKind::usage,
        fmt::format("{}: hidden size, layers, heads and intermediate size must be positive", origin));
  if (m.kv_heads <= 0) m.kv_heads = m.heads;
  if (m.head_size == 0 && m.hidden % m.heads != 0)
    return make_error(ErrorKind::usage,
                      fmt::format("{}: {} heads do not divide the hidden size {} (give 'head_dim')", origin,
                                  m.heads, m.hidden));
  if (m.heads % m.kv_heads != 0)
    return make_error(ErrorKind::usage, fmt::format("{}: {} key/value heads do not divide the {} heads",
                                                    origin, m.kv_heads, m.heads));
  m.params = params_from_shape(m);
  m.active_params = active_params_from_shape(m);
  if (auto valid = validate_model(m); !valid)
    return make_error(ErrorKind::usage, fmt::format("{}: {}", origin, valid.error().message));
  return m;
}

Result<ModelSpec> load_hf_config(const std::string& path) {
  std::error_code ec;
  std::string file = path;
  std::string name = fs::path(path).stem().string();
  if (fs::is_directory(path, ec)) {
    file = (fs::path(path) / "config.json").string();
    name = fs::path(path).lexically_normal().filename().string();
    if (name.empty()) name = fs::path(path).lexically_normal().parent_path().filename().string();
    if (!fs::is_regular_file(file, ec))
      return make_error(ErrorKind::usage, fmt::format("--model: the folder '{}' has no config.json", path));
  }
  bool ok = false;
  const std::string text = file_text(file, ok);
  if (!ok) return make_error(ErrorKind::usage, fmt::format("--model: cannot read '{}'", file));
  return parse_hf_config(text, file, name);
}

Result<ModelSpec> resolve_model(std::string_view what, const ModelSearch& search) {
  std::error_code ec;
  const std::string path(what);
  if (!path.empty() && fs::exists(path, ec)) {
    if (fs::path(path).extension() == ".toml") return load_model_toml(path);
    return load_hf_config(path);
  }
  auto table = find_model(what);
  if (table) return table;
  // A Hub id: org/name, cached as models--org--name.
  const auto slash = what.find('/');
  if (slash != std::string_view::npos && slash > 0 && what.find('/', slash + 1) == std::string_view::npos &&
      slash + 1 < what.size()) {
    const std::string repo_dir = fmt::format("models--{}--{}", what.substr(0, slash), what.substr(slash + 1));
    for (const auto& cache : search.hub_caches) {
      if (cache.empty()) continue;
      if (auto config = cached_config(cache, repo_dir)) {
        GM_TRY(ModelSpec m, load_hf_config(*config));
        m.name = std::string(what);
        m.source = fmt::format("Hugging Face Hub id {} (local cache: {})", what, *config);
        return m;
      }
    }
    std::string looked;
    for (const auto& c : search.hub_caches)
      if (!c.empty()) looked += (looked.empty() ? "" : ", ") + c;
    return make_error(
        ErrorKind::usage,
        fmt::format("--model: '{}' is not a built-in model, a file or a folder, and no "
                    "{} was found in the Hugging Face cache ({}); give the path of its config.json",
                    what, repo_dir, looked.empty() ? "no cache folder" : looked));
  }
  return table.error();
}

double training_flops_per_token(const ModelSpec& m, int seq) {
  if (m.arch == Arch::cnn) return 3.0 * m.fwd_flops_per_sample;
  const double n = m.active_params > 0 ? m.active_params : m.params;
  double attention = 0;
  if (m.has_transformer_shape())
    attention = 6.0 * m.layers * static_cast<double>(m.heads) * (m.head_dim() + m.value_head_dim()) * seq;
  return 6.0 * n + attention;
}

}  // namespace gm::plan
