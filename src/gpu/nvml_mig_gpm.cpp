// The NVML backend's MIG instances (handles, slices, memory) and GPM activity sampling of boards and
// MIG GPU instances.
#include "gpu/nvml_backend.h"

namespace gm::gpu::nvml {

Call NvmlBackend::take_gpm_sample(unsigned index, GpmSample buf, Device h, std::optional<unsigned> gi) {
  int unused = 0;
  if (gi) {
    auto fn = gpm_.mig_sample;
    const unsigned id = *gi;
    return guarded(
        static_cast<int>(index), [fn, h, id, buf](int&) { return fn(h, id, buf); }, unused);
  }
  auto fn = gpm_.sample;
  return guarded(
      static_cast<int>(index), [fn, h, buf](int&) { return fn(h, buf); }, unused);
}

bool NvmlBackend::start_gpm(Ctx& ctx, GpmPair& pair, Device h, std::optional<unsigned> gi) {
  pair.newest = -1;
  pair.active = false;
  for (GpmSample& b : pair.buf) {
    if (b != nullptr) continue;
    auto fn = gpm_.alloc;
    Call c = guarded(
        static_cast<int>(ctx.index), [fn](GpmSample& out) { return fn(&out); }, b);
    if (!ctx.check(c, "nvmlGpmSampleAlloc", this)) return false;
    if (!c.ok()) {
      b = nullptr;
      return true;
    }
  }
  Call c = take_gpm_sample(ctx.index, pair.buf[0], h, gi);
  if (!ctx.check(c, gi ? "nvmlGpmMigSampleGet" : "nvmlGpmSampleGet", this)) return false;
  if (c.ok()) {
    pair.newest = 0;
    pair.active = true;
  }
  return true;
}

bool NvmlBackend::read_gpm(Ctx& ctx, GpmPair& pair, Device h, std::optional<unsigned> gi, GpmMetrics& out) {
  if (!pair.active || !pair.allocated()) return true;
  const int into = pair.next();
  Call c = take_gpm_sample(ctx.index, pair.buf[into], h, gi);
  if (!ctx.check(c, gi ? "nvmlGpmMigSampleGet" : "nvmlGpmSampleGet", this)) return false;
  if (!c.ok()) return true;
  const int previous = pair.newest;
  pair.newest = into;
  if (previous < 0) return true;
  auto fn = gpm_.metrics;
  auto req = std::make_unique<GpmMetricsGet>();
  fill_gpm_request(*req, pair.buf[previous], pair.buf[into]);
  c = guarded(
      static_cast<int>(ctx.index), [fn](GpmMetricsGet& r) { return fn(&r); }, *req);
  if (!ctx.check(c, "nvmlGpmMetricsGet", this)) return false;
  if (c.ok()) out = decode_gpm(*req);
  return true;
}

bool NvmlBackend::probe_gpm(Ctx& ctx, const DeviceInfo& inf, Dev& dev, Capabilities& cap) {
  constexpr const char* kWhat = "GPM (SM, tensor-core, FP pipe and DRAM activity)";
  if (!gpm_.usable()) {
    cap.notes.push_back(std::string(kWhat) + ": " + gpm_.missing() + " not exported by this NVML");
    return true;
  }
  auto fn = gpm_.query;
  Device h = dev.handle;
  GpmSupport support{kGpmSupportVersion, 0};
  Call c = guarded(
      static_cast<int>(ctx.index), [fn, h](GpmSupport& sup) { return fn(h, &sup); }, support);
  if (!ctx.check(c, "nvmlGpmQueryDeviceSupport", this)) return false;
  if (!c.ok() || support.is_supported_device == 0) {
    cap.notes.push_back(std::string(kWhat) + ": not supported on this device (Hopper and newer)");
    return true;
  }
  if (!start_gpm(ctx, dev.gpm, h, std::nullopt)) return false;
  cap.gpm = dev.gpm.active;
  dev.mig_gpm.resize(dev.mig_handles.size());
  if (!inf.mig_instances.empty() && gpm_.mig_sample == nullptr) {
    cap.notes.push_back(std::string(kWhat) +
                        " per MIG instance: nvmlGpmMigSampleGet not exported by this NVML");
  } else {
    for (const MigInstance& mi : inf.mig_instances) {
      if (mi.index >= dev.mig_gpm.size()) continue;
      if (!start_gpm(ctx, dev.mig_gpm[mi.index], h, mi.gpu_instance_id)) return false;
      cap.gpm = cap.gpm || dev.mig_gpm[mi.index].active;
    }
  }
  if (!cap.gpm) cap.notes.push_back(std::string(kWhat) + ": supported, but no sample could be taken");
  return true;
}

void NvmlBackend::free_gpm_buffers() {
  auto fn = gpm_.free;
  if (fn == nullptr) return;
  auto release = [&](GpmPair& pair) {
    for (GpmSample& b : pair.buf) {
      if (b == nullptr) continue;
      GpmSample sample = b;
      (void)guard_.run(kGlobalKey, [fn, sample] { return fn(sample); });
      b = nullptr;
    }
  };
  for (Dev& d : devs_) {
    release(d.gpm);
    for (GpmPair& p : d.mig_gpm) release(p);
  }
}

void NvmlBackend::open_mig(Ctx& ctx, DeviceInfo& inf, Dev& dev, Capabilities& cap) {
  if (s_.max_mig == nullptr || s_.mig_handle == nullptr) {
    cap.notes.push_back("MIG: instance enumeration not exported by this NVML");
    return;
  }
  unsigned max = 0;
  Call c = call_out(ctx.index, s_.max_mig, dev.handle, max);
  if (!ctx.check(c, "nvmlDeviceGetMaxMigDeviceCount", this) || !c.ok()) return;
  // Slices on the board: the largest GPU instance profile it supports (7 on A100/H100, 4 on A30).
  std::optional<unsigned> board_slices;
  if (s_.gi_profile != nullptr) {
    for (unsigned p = 0; p < kGpuInstanceProfileCount; ++p) {
      GpuInstanceProfileInfo pi{};
      c = call_arg(ctx.index, s_.gi_profile, dev.handle, p, pi);
      // Profiles the board lacks answer NOT_SUPPORTED or INVALID_ARGUMENT: expected, not an error.
      if ((c.kind != Call::done || c.lost()) && !ctx.check(c, "nvmlDeviceGetGpuInstanceProfileInfo", this))
        return;
      if (c.ok() && pi.slice_count > 0 && pi.slice_count > board_slices.value_or(0))
        board_slices = pi.slice_count;
    }
  }
  if (!board_slices)
    cap.notes.push_back(
        "MIG: board slice count unknown (nvmlDeviceGetGpuInstanceProfileInfo); instances priced by memory");
  for (unsigned i = 0; i < max; ++i) {
    auto fn = s_.mig_handle;
    Device parent = dev.handle;
    Device mh = nullptr;
    c = guarded(
        static_cast<int>(ctx.index), [fn, parent, i](Device& out) { return fn(parent, i, &out); }, mh);
    if (!ctx.check(c, "nvmlDeviceGetMigDeviceHandleByIndex", this)) return;
    if (!c.ok()) continue;  // NOT_FOUND: no instance in this slot
    if (dev.mig_handles.size() <= i) dev.mig_handles.resize(i + 1, nullptr);
    dev.mig_handles[i] = mh;
    MigInstance mi;
    mi.index = i;
    if (!ctx.check(call_str(ctx.index, s_.uuid, mh, mi.uuid), "nvmlDeviceGetUUID", this)) return;
    unsigned gi = 0;
    c = call_out(ctx.index, s_.gi_id, mh, gi);
    if (!ctx.check(c, "nvmlDeviceGetGpuInstanceId", this)) return;
    if (c.ok()) mi.gpu_instance_id = gi;
    if (s_.attributes != nullptr) {
      DeviceAttributes attrs{};
      c = call_out(ctx.index, s_.attributes, mh, attrs);
      if ((c.kind != Call::done || c.lost()) && !ctx.check(c, "nvmlDeviceGetAttributes_v2", this)) return;
      if (c.ok() && attrs.gpu_instance_slice_count > 0) mi.slice_count = attrs.gpu_instance_slice_count;
    }
    if (mi.slice_count) mi.board_slices = board_slices;
    std::optional<std::uint64_t> total, used;
    if (!read_memory(ctx, mh, &total, &used)) return;
    mi.memory_total_bytes = total;
    mi.memory_used_bytes = used;
    inf.mig_instances.push_back(std::move(mi));
  }
}

}  // namespace gm::gpu::nvml
