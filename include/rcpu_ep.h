/*
 * rcpu_ep.h: the public C interface of rcpu, a CPU execution provider plugin for ONNX Runtime.
 *
 * Load the plugin with ONNX Runtime's plugin-EP API:
 *   OrtApi::RegisterExecutionProviderLibrary(env, "rcpu", "<path>/librcpu_ep.so");
 *   OrtApi::GetEpDevices(env, &devices, &n);            pick devices with EpDevice_EpName == RCPU_EP_NAME
 *   OrtApi::SessionOptionsAppendExecutionProvider_V2(so, env, devs, 1, keys, values, n_options);
 * The plugin exports CreateEpFactories / ReleaseEpFactory (called by ONNX Runtime) and the
 * RcpuEp_* functions below (called by applications and tools through dlsym).
 *
 * This header is plain C99 and needs no ONNX Runtime header. build.rs reads the RCPU_OPT_*
 * defines below to generate the Rust constants, so the two cannot drift apart.
 */
#ifndef RCPU_EP_H
#define RCPU_EP_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The execution provider's name (use it to select the EpDevice) and vendor. */
#define RCPU_EP_NAME "RcpuExecutionProvider"
#define RCPU_EP_VENDOR "rcpu"

/*
 * Provider options: pass them as {key: value} to add_provider_for_devices /
 * SessionOptionsAppendExecutionProvider_V2. An unknown key or a bad value fails session creation
 * with an error that names the key.
 */

/* Number of lanes (the calling thread plus threads-1 pinned workers named rcpu-w0, rcpu-w1, ...).
 * Default: the physical cores in the process's affinity mask. "0" also means the default. */
#define RCPU_OPT_THREADS "threads"
/* Pinning: "physical" (default; one lane per physical core, SMT-aware), "off" (no pinning), or an
 * explicit CPU list such as "0,2,4-6" (threads defaults to its length). */
#define RCPU_OPT_AFFINITY "affinity"
/* Microseconds an idle worker spins before it parks (default 200; 0 parks at once). */
#define RCPU_OPT_BLOCKTIME_US "blocktime_us"
/* Process-wide budget in MiB for prepacked weights (default: half of MemAvailable). 0 disables the
 * cache: kernels then compute from the original weights, with identical results. */
#define RCPU_OPT_WEIGHT_CACHE_MB "weight_cache_mb"
/* Process-wide budget in MiB for the scratch kernels park per thread between calls (packed
 * A/B panels, packed weight groups, attention work buffers, prepared A), summed over all threads,
 * and for the intermediate-value buffers fused partitions keep between runs (default: min(64, 1%
 * of MemAvailable)). A call whose scratch is not granted still runs; it allocates and frees its
 * buffers per call (a fused run frees the value buffers the budget cannot keep). */
#define RCPU_OPT_SCRATCH_CACHE_MB "scratch_cache_mb"
/* The former name of scratch_cache_mb, still accepted with the same meaning (not both at once). */
#define RCPU_OPT_ACCUMULATOR_CACHE_MB "accumulator_cache_mb"
/* "on" (default): rcpu claims each maximal group of its nodes that can run together as ONE fused
 * node and runs the group's nodes itself (one ORT node per group per run, rcpu's own buffers
 * between them); "off": every claimed node is its own ORT node (the per-node path). Results are
 * the same either way. */
#define RCPU_OPT_FUSE "fuse"
/* How MatMulNBits at accuracy_level 4 stores its scales in the packed weights: "f16" (default;
 * per group of 32 columns, where f16 holds every scale as a normal) or "f32" (the model's own
 * scales). f16 reads ~10% fewer bytes per decode token (0.5625 vs 0.625 bytes a weight at block
 * 32) but perturbs the model: on a 6-layer Qwen-shaped model the logits land 1.2-1.3x as far
 * from ORT's as ORT's own spread (one f32 weight moved by 1e-6), f32 stays inside it (0.9-1.1x).
 * Levels 0-3 always keep f32 scales. */
#define RCPU_OPT_ACC4_SCALES "acc4_scales"
/* "off" (default) or "on": each fused node of the session times its steps (one inner node, or a
 * combined step such as a SwiGLU MLP's gate/up pair) on the calling thread and adds the totals
 * per op type to the statistics ("step_times" in RcpuEp_StatsJson: calls and nanoseconds per
 * label, "(fused run)" for whole runs). A diagnostic: two clock reads per step. */
#define RCPU_OPT_STEP_TIMES "step_times"

/*
 * Writes rcpu's statistics (dispatch ledger, step times, pool counters, memory figures) as a JSON document
 * into buf (at most cap bytes, NUL-terminated, truncated to fit) and returns the full length of
 * the JSON without the NUL; call with buf == NULL, cap == 0 to learn the size.
 */
size_t RcpuEp_StatsJson(char* buf, size_t cap);

/* Clears the dispatch ledger and the pool counters. */
void RcpuEp_ResetStats(void);

/* The plugin's version (semver, the same string the EP factory reports). */
const char* RcpuEp_Version(void);

#ifdef __cplusplus
}
#endif

#endif /* RCPU_EP_H */
