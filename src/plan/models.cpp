// The built-in model table (data/models.csv), TOML model files, parameter counts from the shape.
#include <fmt/format.h>
#include <toml++/toml.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>

#include "plan/plan.h"
#include "util/csv.h"
#include "util/embedded.h"
#include "util/enum_text.h"
#include "util/units.h"

namespace gm::plan {

namespace {

Result<Arch> parse_arch(std::string_view text, std::string_view where) {
  const std::string s = util::to_lower(util::trim(text));
  if (s == "decoder") return Arch::decoder;
  if (s == "encoder") return Arch::encoder;
  if (s == "vision_transformer" || s == "vit") return Arch::vision_transformer;
  if (s == "cnn") return Arch::cnn;
  return make_error(
      ErrorKind::usage,
      fmt::format("{}: arch '{}' is not one of decoder, encoder, vision_transformer, cnn", where, text));
}

struct ModelRow {
  ModelSpec spec;
  std::vector<std::string> aliases;
};

Result<double> cell_number(const util::CsvRow& row, int col, std::string_view name, std::string_view origin) {
  if (col < 0) return make_error(fmt::format("{}: missing column '{}'", origin, name));
  const std::string& text = row.fields[static_cast<std::size_t>(col)];
  if (util::trim(text).empty()) return 0.0;
  auto v = util::parse_number(text);
  if (!v) return make_error(fmt::format("{}:{}: column '{}': {}", origin, row.line, name, v.error().message));
  return *v;
}

Result<std::vector<ModelRow>> load_table(std::string_view text, std::string_view origin) {
  GM_TRY(util::CsvTable table, util::parse_csv(text, origin));
  std::vector<ModelRow> out;
  const int c_name = table.column("name"), c_alias = table.column("aliases"), c_arch = table.column("arch"),
            c_source = table.column("source");
  if (c_name < 0 || c_alias < 0 || c_arch < 0 || c_source < 0)
    return make_error(fmt::format("{}: needs columns name, aliases, arch, source", origin));
  for (const auto& row : table.rows) {
    ModelRow m;
    m.spec.name = row.fields[static_cast<std::size_t>(c_name)];
    const std::string where = fmt::format("{}:{}", origin, row.line);
    GM_TRY(m.spec.arch, parse_arch(row.fields[static_cast<std::size_t>(c_arch)], where));
    m.spec.source = row.fields[static_cast<std::size_t>(c_source)];
    std::stringstream aliases(row.fields[static_cast<std::size_t>(c_alias)]);
    for (std::string a; std::getline(aliases, a, ';');)
      if (!util::trim(a).empty()) m.aliases.emplace_back(util::trim(a));
    auto num = [&](const char* col) { return cell_number(row, table.column(col), col, origin); };
    auto integer = [&](const char* col) -> Result<int> {
      GM_TRY(double v, num(col));
      return static_cast<int>(std::llround(v));
    };
    GM_TRY(m.spec.params, num("params"));
    GM_TRY(m.spec.active_params, num("active_params"));
    GM_TRY(m.spec.layers, integer("layers"));
    GM_TRY(m.spec.hidden, integer("hidden"));
    GM_TRY(m.spec.heads, integer("heads"));
    GM_TRY(m.spec.kv_heads, integer("kv_heads"));
    GM_TRY(m.spec.ffn, integer("ffn"));
    GM_TRY(m.spec.vocab, integer("vocab"));
    GM_TRY(m.spec.seq, integer("seq"));
    GM_TRY(int gated, integer("gated_mlp"));
    m.spec.gated_mlp = gated != 0;
    GM_TRY(int tied, integer("tied_embeddings"));
    m.spec.tied_embeddings = tied != 0;
    GM_TRY(int qkv_bias, integer("qkv_bias"));
    m.spec.qkv_bias = qkv_bias != 0;
    GM_TRY(m.spec.experts, integer("experts"));
    GM_TRY(m.spec.experts_per_token, integer("experts_per_token"));
    GM_TRY(m.spec.fwd_flops_per_sample, num("fwd_flops_per_sample"));
    GM_TRY(m.spec.activations_per_sample, num("activations_per_sample"));
    auto cell_text = [&](const char* col) {
      const int c = table.column(col);
      return c < 0 ? std::string() : std::string(util::trim(row.fields[static_cast<std::size_t>(c)]));
    };
    m.spec.family = cell_text("family");
    if (table.column("head_dim") >= 0) {
      GM_TRY(m.spec.head_size, integer("head_dim"));
    }
    if (table.column("qk_norm") >= 0) {
      GM_TRY(int qk, integer("qk_norm"));
      m.spec.qk_norm = qk != 0;
    }
    m.spec.impl = family_implementation(m.spec.family, m.spec.gated_mlp);
    if (const std::string config = cell_text("hf_config"); !config.empty()) {
      // The shape comes from the model's published config.json (data/hf_configs/), embedded.
      const std::string file = "hf_configs/" + config;
      auto body = util::embedded_file(file);
      if (!body) return make_error(fmt::format("{}: '{}' is not embedded", where, file));
      GM_TRY(ModelSpec parsed, parse_hf_config(*body, file, m.spec.name));
      parsed.name = m.spec.name;
      parsed.source = m.spec.source;
      if (m.spec.seq > 0) parsed.seq = m.spec.seq;
      m.spec = std::move(parsed);
    }
    if (m.spec.params <= 0) m.spec.params = params_from_shape(m.spec);
    if (m.spec.active_params <= 0) m.spec.active_params = active_params_from_shape(m.spec);
    if (m.spec.active_params <= 0) m.spec.active_params = m.spec.params;
    GM_TRY_VOID(validate_model(m.spec));
    out.push_back(std::move(m));
  }
  return out;
}

const std::vector<ModelRow>& table_rows() {
  static const std::vector<ModelRow> rows = [] {
    auto text = util::embedded_file("models.csv");
    if (!text) return std::vector<ModelRow>{};
    auto parsed = load_table(*text, "models.csv");
    // The embedded table is checked by unit tests; a broken one yields an empty table, not a crash.
    return parsed ? std::move(parsed).value() : std::vector<ModelRow>{};
  }();
  return rows;
}

std::string normalise(std::string_view name) {
  std::string s = util::to_lower(util::trim(name));
  for (char& c : s)
    if (c == '_' || c == ' ') c = '-';
  return s;
}

}  // namespace

const std::vector<ModelSpec>& builtin_models() {
  static const std::vector<ModelSpec> models = [] {
    std::vector<ModelSpec> out;
    for (const auto& r : table_rows()) out.push_back(r.spec);
    return out;
  }();
  return models;
}

Result<ModelSpec> find_model(std::string_view name) {
  const std::string wanted = normalise(name);
  std::vector<std::string> names;
  for (const auto& r : table_rows()) {
    if (normalise(r.spec.name) == wanted) return r.spec;
    for (const auto& a : r.aliases)
      if (normalise(a) == wanted) return r.spec;
    names.push_back(r.spec.name);
  }
  std::string hint = util::suggest_names(wanted, names, 3);
  return make_error(
      ErrorKind::usage,
      fmt::format("--model: unknown model '{}'{}; built-in models: gpumeter plan --list-models, or "
                  "describe it with --params or --layers/--hidden/--heads or --model-file",
                  name, hint.empty() ? "" : fmt::format(" (did you mean {}?)", hint)));
}

namespace {

/// A model name without organisation, variant suffixes and case: "meta-llama/Meta-Llama-3-8B-Instruct" →
/// "llama-3-8b".
std::string served_key(std::string_view name) {
  if (auto slash = name.rfind('/'); slash != std::string_view::npos) name.remove_prefix(slash + 1);
  std::string s;
  for (char c : name) s.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
  if (s.starts_with("meta-")) s.erase(0, 5);
  for (const char* suffix : {"-instruct", "-chat", "-it"})
    if (auto at = s.find(suffix); at != std::string::npos) s.erase(at);
  for (const char* suffix : {"-hf"})
    if (s.ends_with(suffix)) s.erase(s.size() - std::strlen(suffix));
  // A trailing version ("-v0.1", "-v2") names a release of the same shape.
  if (auto v = s.rfind("-v");
      v != std::string::npos && v + 2 < s.size() &&
      std::all_of(s.begin() + static_cast<std::ptrdiff_t>(v + 2), s.end(),
                  [](char c) { return std::isdigit(static_cast<unsigned char>(c)) || c == '.'; }))
    s.erase(v);
  return s;
}

}  // namespace

std::optional<ModelSpec> find_served_model(std::string_view served_name) {
  const std::string wanted = served_key(served_name);
  if (wanted.empty()) return std::nullopt;
  for (const auto& r : table_rows()) {
    if (served_key(r.spec.name) == wanted) return r.spec;
    for (const auto& a : r.aliases)
      if (served_key(a) == wanted) return r.spec;
  }
  return std::nullopt;
}

double params_from_shape(const ModelSpec& m) {
  if (!m.has_transformer_shape() || m.ffn <= 0) return 0;
  const double h = m.hidden, f = m.ffn, L = m.layers, V = m.vocab, a = m.heads;
  const double hd = m.head_dim(), vhd = m.value_head_dim();
  const double kv = (m.kv_heads > 0 ? m.kv_heads : m.heads) * hd;
  const double mlp = (m.gated_mlp ? 3.0 : 2.0) * h * f;
  if (!m.gated_mlp) {
    // GPT-style: biases, LayerNorm, learned positions, tied embeddings.
    const double attn = h * (h + 2 * kv) + h * h + (m.qkv_bias ? h + 2 * kv : 0.0);
    const double experts = m.experts > 0 ? m.experts : 1;
    const double router = m.experts > 0 ? h * m.experts : 0;
    const double biases = 4 * h + f + h + 4 * h;
    const double embeddings = (m.tied_embeddings ? 1.0 : 2.0) * V * h;
    return L * (attn + experts * mlp + router + biases) + embeddings + static_cast<double>(m.seq) * h + 2 * h;
  }
  double attn = 0;
  if (m.mla()) {
    // DeepSeek MLA: compressed query (q_a, its norm, q_b), compressed key/value with the shared rotary key
    // (kv_a, its norm, kv_b), output projection.
    const double r = m.q_lora_rank, c = m.kv_lora_rank, nope = hd - m.rope_head_dim;
    attn = (r > 0 ? h * r + r + r * a * hd : h * a * hd) + h * (c + m.rope_head_dim) + c +
           c * a * (nope + vhd) + a * vhd * h;
  } else {
    const double q = a * hd;
    attn = h * (q + 2 * kv) + q * h + (m.qkv_bias ? q + 2 * kv : 0.0) + (m.o_bias ? h : 0.0) +
           (m.qk_norm ? 2 * hd : 0.0) + (m.attention_sinks ? a : 0.0);
  }
  const double norms = m.impl.norms_per_layer * h;
  double layers_total = 0;
  if (m.experts > 0) {
    const double dense = std::min<double>(m.dense_layers, L);
    const double dense_mlp = 3.0 * h * (m.dense_ffn > 0 ? m.dense_ffn : f);
    double moe = m.experts * mlp + h * m.experts;
    if (m.shared_ffn > 0) moe += 3.0 * h * m.shared_ffn + (m.family == "qwen2_moe" ? h : 0.0);
    if (m.moe_biases) moe += m.experts * (2.0 * f + h) + m.experts;  // expert biases, router bias
    if (m.family == "deepseek_v3") moe += m.experts;                 // the router's score-correction bias
    layers_total = dense * (attn + dense_mlp + norms) + (L - dense) * (attn + moe + norms);
  } else {
    layers_total = L * (attn + mlp + norms);
  }
  // RMSNorm models: untied embeddings unless said otherwise, one final norm.
  return layers_total + (m.tied_embeddings ? 1.0 : 2.0) * V * h + h;
}

double active_params_from_shape(const ModelSpec& m) {
  if (m.experts <= 0 || m.experts_per_token <= 0) return m.params;
  const double mlp = (m.gated_mlp ? 3.0 : 2.0) * m.hidden * static_cast<double>(m.ffn);
  const double moe_layers = std::max(m.layers - m.dense_layers, 0);
  return m.params - moe_layers * (m.experts - m.experts_per_token) * mlp;
}

Result<void> validate_model(const ModelSpec& m) {
  const std::string who = m.name.empty() ? std::string("model") : fmt::format("model '{}'", m.name);
  if (!(m.params > 0) || !std::isfinite(m.params))
    return make_error(ErrorKind::usage, fmt::format("{}: the parameter count must be positive", who));
  if (m.active_params > m.params)
    return make_error(ErrorKind::usage, fmt::format("{}: active parameters exceed the total", who));
  const int fields[] = {m.layers, m.hidden, m.heads,   m.kv_heads,         m.ffn,
                        m.vocab,  m.seq,    m.experts, m.experts_per_token};
  for (int v : fields)
    if (v < 0) return make_error(ErrorKind::usage, fmt::format("{}: sizes must not be negative", who));
  if (m.arch == Arch::cnn) return ok_result();
  if (m.has_transformer_shape()) {
    if (m.head_size == 0 && m.hidden % m.heads != 0)
      return make_error(ErrorKind::usage, fmt::format("{}: heads ({}) must divide the hidden size ({})", who,
                                                      m.heads, m.hidden));
    if (m.kv_heads > 0 && (m.kv_heads > m.heads || m.heads % m.kv_heads != 0))
      return make_error(ErrorKind::usage, fmt::format("{}: kv heads ({}) must divide the heads ({})", who,
                                                      m.kv_heads, m.heads));
  }
  if (m.experts_per_token > m.experts)
    return make_error(ErrorKind::usage, fmt::format("{}: experts per token exceed the experts", who));
  return ok_result();
}

Result<ModelSpec> build_model(const std::optional<ModelSpec>& base, const ModelOverrides& o) {
  auto usage = [](std::string message) { return make_error(ErrorKind::usage, std::move(message)); };
  if (!base && !o.params && !o.has_shape())
    return usage("say which model: --model NAME, --params N, --model-file FILE or --layers/--hidden/--heads");
  ModelSpec m;
  if (base) {
    m = *base;
  } else {
    m.name = "custom";
    m.arch = Arch::decoder;
    m.gated_mlp = true;
    m.source = "command line";
  }
  for (auto [v, flag] : {std::pair{o.layers, "--layers"},
                         {o.hidden, "--hidden"},
                         {o.heads, "--heads"},
                         {o.kv_heads, "--kv-heads"},
                         {o.ffn, "--ffn"},
                         {o.vocab, "--vocab"}})
    if (v && *v <= 0) return usage(fmt::format("{} must be a positive number, not {}", flag, *v));
  if (o.has_shape()) {
    if (o.layers) m.layers = *o.layers;
    if (o.hidden) m.hidden = *o.hidden;
    if (o.heads) m.heads = *o.heads;
    if (o.kv_heads)
      m.kv_heads = *o.kv_heads;
    else if (o.heads && !base)
      m.kv_heads = *o.heads;
    if (o.ffn)
      m.ffn = *o.ffn;
    else if (o.hidden && !base)
      m.ffn = 4 * *o.hidden;
    if (o.vocab) m.vocab = *o.vocab;
    if (!m.has_transformer_shape())
      return usage("--layers, --hidden and --heads are all needed to describe a transformer");
    if (m.hidden % m.heads != 0)
      return usage(fmt::format("--heads {} does not divide --hidden {}", m.heads, m.hidden));
    if (m.kv_heads <= 0 || m.heads % m.kv_heads != 0)
      return usage(fmt::format("--kv-heads {} does not divide the {} heads", m.kv_heads, m.heads));
    if (base) m.name += " (modified)";
    m.params = params_from_shape(m);
    m.active_params = active_params_from_shape(m);
  }
  if (o.params) {
    if (!(*o.params > 0) || !std::isfinite(*o.params)) return usage("--params must be a positive number");
    if (m.active_params <= 0 || m.active_params == m.params) m.active_params = *o.params;
    m.params = *o.params;
  }
  return m;
}

constexpr util::EnumText<NormKind> kNormKinds[] = {{NormKind::layernorm, "layernorm"},
                                                   {NormKind::rmsnorm_fp32, "rmsnorm_fp32"},
                                                   {NormKind::rmsnorm, "rmsnorm"}};
constexpr util::EnumText<MlpActivation> kMlpActivations[] = {{MlpActivation::gelu, "gelu"},
                                                             {MlpActivation::gelu_python, "gelu_python"},
                                                             {MlpActivation::gated, "gated"}};

/// A model file's setting `key` = `text` as one of `table`'s values; a usage error naming the file otherwise.
template <class E, std::size_t N>
Result<E> model_setting(const util::EnumText<E> (&table)[N], const std::string& text, std::string_view origin,
                        const char* key) {
  if (auto v = util::enum_from_text(table, text)) return *v;
  return make_error(ErrorKind::usage,
                    fmt::format("{}: {} '{}' is not one of {}", origin, key, text, util::enum_texts(table)));
}

Result<ModelSpec> parse_model_toml(std::string_view text, std::string_view origin) {
  toml::table tbl;
  try {
    tbl = toml::parse(text, origin);
  } catch (const toml::parse_error& e) {
    return make_error(ErrorKind::usage, fmt::format("{}:{}:{}: {}", origin, e.source().begin.line,
                                                    e.source().begin.column, e.description()));
  }
  static const char* const known[] = {"name",
                                      "arch",
                                      "params",
                                      "active_params",
                                      "layers",
                                      "hidden",
                                      "heads",
                                      "kv_heads",
                                      "ffn",
                                      "vocab",
                                      "seq",
                                      "gated_mlp",
                                      "tied_embeddings",
                                      "qkv_bias",
                                      "experts",
                                      "experts_per_token",
                                      "fwd_flops_per_sample",
                                      "activations_per_sample",
                                      "source",
                                      "family",
                                      "head_dim",
                                      "qk_norm",
                                      "norm",
                                      "norms_per_layer",
                                      "softmax_fp32",
                                      "fused_qkv",
                                      "fused_gate_up",
                                      "mlp_activation",
                                      "attention_dropout",
                                      "hidden_dropout",
                                      "embedding_dropout"};
  for (const auto& [key, node] : tbl) {
    bool ok = false;
    for (const char* k : known) ok = ok || key.str() == k;
    if (!ok)
      return make_error(ErrorKind::usage,
                        fmt::format("{}:{}: unknown key '{}'", origin, node.source().begin.line, key.str()));
  }
  ModelSpec m;
  m.name = tbl["name"].value_or(std::string("custom"));
  m.source = tbl["source"].value_or(std::string(origin));
  if (auto a = tbl["arch"].value<std::string>()) {
    GM_TRY(m.arch, parse_arch(*a, fmt::format("{}: arch", origin)));
  }
  auto number = [&](const char* key) -> Result<double> {
    const toml::node* n = tbl.get(key);
    if (!n) return 0.0;
    if (auto v = n->value<double>()) {
      if (!std::isfinite(*v) || *v < 0)
        return make_error(ErrorKind::usage, fmt::format("{}:{}: '{}' must be a non-negative number", origin,
                                                        n->source().begin.line, key));
      return *v;
    }
    return make_error(ErrorKind::usage,
                      fmt::format("{}:{}: '{}' must be a number", origin, n->source().begin.line, key));
  };
  auto integer = [&](const char* key) -> Result<int> {
    GM_TRY(double v, number(key));
    if (v != std::floor(v) || v > 1e9)
      return make_error(ErrorKind::usage, fmt::format("{}: '{}' must be a whole number", origin, key));
    return static_cast<int>(v);
  };
  GM_TRY(m.params, number("params"));
  GM_TRY(m.active_params, number("active_params"));
  GM_TRY(m.layers, integer("layers"));
  GM_TRY(m.hidden, integer("hidden"));
  GM_TRY(m.heads, integer("heads"));
  GM_TRY(m.kv_heads, integer("kv_heads"));
  GM_TRY(m.ffn, integer("ffn"));
  GM_TRY(m.vocab, integer("vocab"));
  GM_TRY(m.seq, integer("seq"));
  GM_TRY(m.experts, integer("experts"));
  GM_TRY(m.experts_per_token, integer("experts_per_token"));
  GM_TRY(m.fwd_flops_per_sample, number("fwd_flops_per_sample"));
  GM_TRY(m.activations_per_sample, number("activations_per_sample"));
  GM_TRY(m.head_size, integer("head_dim"));
  auto flag = [&](const char* key, bool* slot) -> Result<void> {
    if (const toml::node* g = tbl.get(key)) {
      auto b = g->value<bool>();
      if (!b) return make_error(ErrorKind::usage, fmt::format("{}: '{}' must be true or false", origin, key));
      *slot = *b;
    }
    return ok_result();
  };
  for (auto [key, slot] : {std::pair<const char*, bool*>{"gated_mlp", &m.gated_mlp},
                           {"tied_embeddings", &m.tied_embeddings},
                           {"qkv_bias", &m.qkv_bias},
                           {"qk_norm", &m.qk_norm}}) {
    GM_TRY_VOID(flag(key, slot));
  }
  // How the layers are written: the family's, then what the file says.
  m.family = tbl["family"].value_or(std::string());
  m.impl = family_implementation(m.family, m.gated_mlp);
  GM_TRY_VOID(flag("softmax_fp32", &m.impl.softmax_fp32));
  GM_TRY_VOID(flag("fused_qkv", &m.impl.fused_qkv));
  GM_TRY_VOID(flag("fused_gate_up", &m.impl.fused_gate_up));
  if (tbl.get("norms_per_layer")) {
    GM_TRY(m.impl.norms_per_layer, integer("norms_per_layer"));
  }
  for (auto [key, slot] : {std::pair<const char*, double*>{"attention_dropout", &m.impl.attention_dropout},
                           {"hidden_dropout", &m.impl.hidden_dropout},
                           {"embedding_dropout", &m.impl.embedding_dropout}}) {
    if (!tbl.get(key)) continue;
    GM_TRY(*slot, number(key));
    if (*slot >= 1) return make_error(ErrorKind::usage, fmt::format("{}: '{}' must be below 1", origin, key));
  }
  if (auto n = tbl["norm"].value<std::string>()) {
    GM_TRY(m.impl.norm, model_setting(kNormKinds, *n, origin, "norm"));
  }
  if (auto a = tbl["mlp_activation"].value<std::string>()) {
    GM_TRY(m.impl.mlp, model_setting(kMlpActivations, *a, origin, "mlp_activation"));
  }
  if (m.kv_heads == 0) m.kv_heads = m.heads;
  if (m.params <= 0) m.params = params_from_shape(m);
  if (m.active_params <= 0) m.active_params = active_params_from_shape(m);
  if (m.params <= 0)
    return make_error(
        ErrorKind::usage,
        fmt::format("{}: give 'params', or 'layers', 'hidden', 'heads' and 'ffn' to count them", origin));
  GM_TRY_VOID(validate_model(m));
  return m;
}

Result<ModelSpec> load_model_toml(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return make_error(ErrorKind::usage, fmt::format("--model-file: cannot read '{}'", path));
  std::stringstream buf;
  buf << in.rdbuf();
  return parse_model_toml(buf.str(), path);
}

constexpr util::EnumText<Arch> kArchs[] = {{Arch::decoder, "decoder"},
                                           {Arch::encoder, "encoder"},
                                           {Arch::vision_transformer, "vision_transformer"},
                                           {Arch::cnn, "cnn"}};

std::string_view arch_name(Arch arch) {
  return util::enum_text(kArchs, arch, "decoder");
}

}  // namespace gm::plan
