"""EPContext models (src/ep/context): a session with `ep.context_enable=1` writes the context model and
rcpu's context file beside it; a session created from the context model maps that file, packs nothing, and
answers bit for bit as the session that wrote it. Every damaged, foreign or misplaced file is a clean error
that names the file and the problem.

The file's layout (src/ep/context/file.rs): a 64-byte preamble (magic, format, directory offset, length and
CRC-32), page-aligned sections, and a JSON directory (rcpu version, instruction-set level, packing options,
sections with their CRC-32, partitions)."""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import struct
import subprocess
import sys
import zlib

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from conftest import EP_NAME, REPO, assignment, rel_l2

BENCH = REPO / "target" / "release" / "rcpu-bench"
VOCAB = 1000


def _generate(dest: pathlib.Path, acc: int) -> pathlib.Path:
    if not BENCH.is_file():
        pytest.fail(f"{BENCH} missing: `cargo build --release --workspace` first", pytrace=False)
    spec = f"llm:preset=qwen2-0.5b,layers=2,vocab={VOCAB},acc={acc},ctx=128,seed=5"
    path = dest / "model.onnx"
    out = subprocess.run([str(BENCH), "gen", spec, "--out", str(path)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return path


def _options(devices, config: dict | None = None, provider: dict | None = None) -> ort.SessionOptions:
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.log_severity_level = 3
    so.add_session_config_entry("session.record_ep_graph_assignment_info", "1")
    for k, v in (config or {}).items():
        so.add_session_config_entry(k, v)
    so.add_provider_for_devices(devices, {k: str(v) for k, v in (provider or {}).items()})
    return so


def _write_context(devices, model: pathlib.Path, provider: dict | None = None) -> ort.InferenceSession:
    ctx = model.with_name("model_ctx.onnx")
    so = _options(devices, {"ep.context_enable": "1", "ep.context_file_path": str(ctx)}, provider)
    return ort.InferenceSession(str(model), so, enable_fallback=0)


def _load(devices, path: pathlib.Path, provider: dict | None = None) -> ort.InferenceSession:
    return ort.InferenceSession(str(path), _options(devices, provider=provider), enable_fallback=0)


def _steps(sess, seed: int = 3) -> list[list[np.ndarray]]:
    """A prompt of 6 tokens, then 3 greedy decode steps fed the presents: every run's outputs."""
    rng = np.random.default_rng(seed)
    names = [o.name for o in sess.get_outputs()]
    feeds = {"input_ids": rng.integers(0, VOCAB, (1, 6)).astype(np.int64), "attention_mask": np.ones((1, 6), np.int64)}
    for i in sess.get_inputs()[2:]:
        feeds[i.name] = np.zeros((1, i.shape[1], 0, i.shape[3]), np.float32)
    runs = []
    total = 6
    for _ in range(4):
        out = sess.run(None, feeds)
        runs.append(out)
        total += 1
        feeds = {"input_ids": np.array([[int(np.argmax(out[0][0, -1]))]], np.int64),
                 "attention_mask": np.ones((1, total), np.int64),
                 **{n.replace("present.", "past_key_values."): v for n, v in zip(names[1:], out[1:])}}
    return runs


@pytest.fixture(scope="module", params=[0, 4], ids=["acc0", "acc4"])
def written(request, tmp_path_factory, rcpu_devices):
    """(folder, original model, the writing session's outputs) for a 2-layer Qwen2-shaped model."""
    d = tmp_path_factory.mktemp(f"ctx_acc{request.param}")
    model = _generate(d, request.param)
    writer = _write_context(rcpu_devices, model)
    return d, model, _steps(writer)


def test_context_model_answers_as_its_writer(written, rcpu_devices, stats):
    d, model, want = written
    ctx, data = d / "model_ctx.onnx", d / "model_ctx.rcpu"
    assert ctx.is_file() and data.is_file()
    m = onnx.load(str(ctx))
    ops = [n.op_type for n in m.graph.node]
    assert ops.count("EPContext") == 1, ops
    node = next(n for n in m.graph.node if n.op_type == "EPContext")
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    assert attrs["source"] == EP_NAME.encode() and attrs["ep_cache_context"] == b"model_ctx.rcpu"
    assert attrs["embed_mode"] == 0
    # The weights left the model: what remains is the graph ORT keeps and its constants (here the tied
    # table ORT's Reshape feeds the embedding gather, 1/43 of the model).
    assert ctx.stat().st_size * 20 < model.stat().st_size, (ctx.stat().st_size, model.stat().st_size)
    stats.reset()
    before = stats.json()["memory"]["weight_cache"]
    sess = _load(rcpu_devices, ctx)
    after = stats.json()["memory"]["weight_cache"]
    assert after["packs"] == before["packs"], f"a context model must pack nothing: {before} -> {after}"
    assert after["adopted"] > before["adopted"], after
    assert node.name in assignment(sess).get(EP_NAME, set())
    got = _steps(sess)
    for r, (a, b) in enumerate(zip(got, want)):
        for i, (x, y) in enumerate(zip(a, b)):
            assert x.dtype == y.dtype and x.shape == y.shape
            assert np.array_equal(x, y), f"run {r} output {i}: the context model's answer differs from its writer's"


def test_context_model_matches_ort(written, rcpu_devices):
    """The context model against ORT's CPU EP on the original model (level 0: logits within 1e-4)."""
    d, model, _ = written
    if "acc0" not in d.name:
        pytest.skip("level 4 is compared with its writer bit for bit; ORT's level 4 quantizes differently")
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    cpu = ort.InferenceSession(str(model), so, providers=["CPUExecutionProvider"])
    for r, (a, b) in enumerate(zip(_steps(_load(rcpu_devices, d / "model_ctx.onnx")), _steps(cpu))):
        assert rel_l2(a[0], b[0]) <= 1e-4, f"run {r}: logits rel L2 {rel_l2(a[0], b[0]):.3e}"


def _copy(written, dest: pathlib.Path) -> pathlib.Path:
    d = written[0]
    dest.mkdir(parents=True, exist_ok=True)
    for f in ("model_ctx.onnx", "model_ctx.rcpu"):
        shutil.copy(d / f, dest / f)
    return dest / "model_ctx.onnx"


def _refused(devices, ctx: pathlib.Path, *needles: str, provider: dict | None = None) -> str:
    with pytest.raises(Exception) as e:
        _load(devices, ctx, provider)
    msg = str(e.value)
    for n in needles:
        assert n in msg, f"expected {n!r} in the error: {msg}"
    return msg


def _directory(data: bytes) -> tuple[int, dict]:
    at, length = struct.unpack_from("<QQ", data, 16)
    return at, json.loads(data[at:at + length])


def _with_directory(data: bytes, edit) -> bytes:
    at, d = _directory(data)
    edit(d)
    body = json.dumps(d).encode()
    head = bytearray(data[:64])
    struct.pack_into("<QQI", head, 16, at, len(body), zlib.crc32(body))
    return bytes(head) + data[64:at] + body


def test_truncated_file_is_refused(written, rcpu_devices, tmp_path):
    ctx = _copy(written, tmp_path)
    data = ctx.with_name("model_ctx.rcpu")
    b = data.read_bytes()
    data.write_bytes(b[: len(b) // 2])
    _refused(rcpu_devices, ctx, str(data), "truncated")
    data.write_bytes(b[:40])
    _refused(rcpu_devices, ctx, str(data), "not an rcpu context file")


def test_corrupted_section_is_refused(written, rcpu_devices, tmp_path):
    ctx = _copy(written, tmp_path)
    data = ctx.with_name("model_ctx.rcpu")
    b = bytearray(data.read_bytes())
    _, d = _directory(bytes(b))
    off, length, _ = max(d["sections"], key=lambda s: s[1])
    b[off + length // 2] ^= 0x10
    data.write_bytes(bytes(b))
    _refused(rcpu_devices, ctx, str(data), "checksum does not match")


def test_corrupted_directory_is_refused(written, rcpu_devices, tmp_path):
    ctx = _copy(written, tmp_path)
    data = ctx.with_name("model_ctx.rcpu")
    b = bytearray(data.read_bytes())
    at, _ = _directory(bytes(b))
    b[at + 3] ^= 0x01
    data.write_bytes(bytes(b))
    _refused(rcpu_devices, ctx, "directory's checksum")


@pytest.mark.parametrize("field,value,needle", [
    ("rcpu_version", "0.0.0-other", "rcpu version"),
    ("isa", "avx512vnni-elsewhere", "instruction-set level"),
])
def test_foreign_file_is_refused(written, rcpu_devices, tmp_path, field, value, needle):
    ctx = _copy(written, tmp_path)
    data = ctx.with_name("model_ctx.rcpu")
    data.write_bytes(_with_directory(data.read_bytes(), lambda d: d.__setitem__(field, value)))
    _refused(rcpu_devices, ctx, str(data), needle, value)


def test_other_packing_options_are_refused(written, rcpu_devices, tmp_path):
    ctx = _copy(written, tmp_path)
    _refused(rcpu_devices, ctx, "acc4_scales", provider={"acc4_scales": "f32"})


def test_foreign_format_is_refused(written, rcpu_devices, tmp_path):
    ctx = _copy(written, tmp_path)
    data = ctx.with_name("model_ctx.rcpu")
    b = bytearray(data.read_bytes())
    struct.pack_into("<I", b, 8, 99)
    data.write_bytes(bytes(b))
    _refused(rcpu_devices, ctx, "format 99")


def test_missing_partition_and_bad_names_are_refused(written, rcpu_devices, tmp_path):
    ctx = _copy(written, tmp_path)
    data = ctx.with_name("model_ctx.rcpu")
    data.write_bytes(_with_directory(data.read_bytes(),
                                     lambda d: d.__setitem__("partitions", {"other": v for v in d["partitions"].values()})))
    _refused(rcpu_devices, ctx, "no partition")
    m = onnx.load(str(ctx))
    node = next(n for n in m.graph.node if n.op_type == "EPContext")
    for a in node.attribute:
        if a.name == "ep_cache_context":
            a.s = b"../model_ctx.rcpu"
    onnx.save(m, str(ctx))
    _refused(rcpu_devices, ctx, "plain file name")
    for a in node.attribute:
        if a.name == "ep_cache_context":
            a.s = b"absent.rcpu"
    onnx.save(m, str(ctx))
    _refused(rcpu_devices, ctx, str(tmp_path / "absent.rcpu"))


def test_compiling_a_context_model_again_is_refused(written, rcpu_devices, tmp_path):
    ctx = _copy(written, tmp_path)
    so = _options(rcpu_devices, {"ep.context_enable": "1", "ep.context_file_path": str(tmp_path / "again.onnx")})
    with pytest.raises(Exception) as e:
        ort.InferenceSession(str(ctx), so, enable_fallback=0)
    assert "already is a context model" in str(e.value)


WRITER = """
import sys, onnxruntime as ort
ort.register_execution_provider_library("rcpu", sys.argv[1])
so = ort.SessionOptions()
so.log_severity_level = 3
so.add_session_config_entry("ep.context_enable", "1")
so.add_session_config_entry("ep.context_file_path", sys.argv[3])
so.add_provider_for_devices([d for d in ort.get_ep_devices() if d.ep_name == "RcpuExecutionProvider"], {})
ort.InferenceSession(sys.argv[2], so, enable_fallback=0)
"""


def test_concurrent_writers_leave_a_whole_file(written, rcpu_devices, plugin_path, tmp_path):
    """Three processes writing the same context at once: each writes rcpu's file under a name of its own and
    renames it into place, so the file left is one writer's whole file, never a mix. (ORT refuses to write a
    context model over an existing one: the writers after the first may fail, with ORT's message.)"""
    d, model, want = written
    shutil.copy(model, tmp_path / "model.onnx")
    ctx = tmp_path / "model_ctx.onnx"
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(plugin_path), str(tmp_path / "model.onnx"), str(ctx)],
                              stderr=subprocess.PIPE, text=True) for _ in range(3)]
    results = [(p.wait(timeout=300), p.stderr.read()) for p in procs]
    assert any(rc == 0 for rc, _ in results), results
    for rc, err in results:
        assert rc == 0 or "exists already" in err, err
    assert not [f for f in os.listdir(tmp_path) if ".tmp" in f], os.listdir(tmp_path)
    got = _steps(_load(rcpu_devices, ctx))
    for a, b in zip(got, want):
        assert all(np.array_equal(x, y) for x, y in zip(a, b))


def test_compile_api_writes_the_same_context(written, rcpu_devices, tmp_path):
    """ORT's compile API (`ort.ModelCompiler`) makes the context model as `ep.context_enable` does, with
    ORT's leftover initializers in an external file: the way for models whose weights left to ORT pass
    protobuf's 2 GB (gpt-oss's float32 embedding). The result answers as the writer."""
    d, model, want = written
    shutil.copy(model, tmp_path / "model.onnx")
    so = _options(rcpu_devices)
    out = tmp_path / "compiled_ctx.onnx"
    ort.ModelCompiler(so, str(tmp_path / "model.onnx"), external_initializers_file_path="compiled_ctx.onnx.data",
                      external_initializers_size_threshold=1024).compile_to_file(str(out))
    assert (tmp_path / "compiled_ctx.rcpu").is_file()
    got = _steps(_load(rcpu_devices, out))
    for a, b in zip(got, want):
        assert all(np.array_equal(x, y) for x, y in zip(a, b))
