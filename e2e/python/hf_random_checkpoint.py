"""A Hugging Face checkpoint with a real model's configuration and seeded random weights, for
onnxruntime-genai's model builder (no download: the configurations are written out here).

    python hf_random_checkpoint.py NAME OUT_DIR [--layers N]

NAME is one of CONFIGS (the shapes of the models users run through the builder: the decoder families
it writes differently: packed or split QKV, biases, q/k norms, windows and softcaps, partial and LongRoPE
rotary, LayerNorm and relu2 / GELU MLPs, untied heads). Gemma-3 is not among them: builder 0.18.0 reads
`rope_parameters["rope_type"]`, which transformers 5 nests per layer type for Gemma-3; and it fails on
SmolLM3's NoPE layers (every fourth; `KeyError: 'position_ids'`), so SmolLM3 builds with up to 3 layers.
Mixtures of experts: gpt-oss-20b is written as openai's checkpoint is (write_gpt_oss: bfloat16, MXFP4
experts), which the builder's gpt-oss loader reads and re-quantizes to int4 QMoE. phi3.5-moe is here but
builder 0.18.0 does not build it: Phi3MoELongRoPEModel derives from MistralModel, not from the LongRoPE
Phi-3 class, so builders/base.py make_rope_init raises `NotImplementedError: The longrope RoPE style is not
currently supported.` in its constructor (and it forces `-e cuda`, then reads transformers 4's
`layer.block_sparse_moe` / `experts[i].w1`, which transformers 5's Phimoe names `layer.mlp` with fused
`experts.gate_up_proj`). `--layers N` keeps the real widths but only N decoder layers (a quicker model
for the checks; the full depth for timings). Weights are the transformers library's own
initialisation (seed 1234; float32, bfloat16 where the config says so); every 1-D weight (norms, biases)
is then moved by N(0, 0.1) so that a norm or bias applied wrongly shows in the logits. The tokenizer is
a placeholder word-level one of 512 entries (the builder copies a tokenizer; random-weight models are
driven by token ids).

Runs in the builder's environment (torch, transformers: scripts/builder_models.sh makes it), not in the
test environment.
"""

from __future__ import annotations

import argparse

CONFIGS = {
    "qwen2-0.5b": dict(
        architectures=["Qwen2ForCausalLM"], model_type="qwen2", hidden_size=896, intermediate_size=4864,
        num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2, vocab_size=151936,
        rope_theta=1000000.0, rms_norm_eps=1e-6, tie_word_embeddings=True, max_position_embeddings=32768,
        hidden_act="silu", bos_token_id=151643, eos_token_id=151643, use_sliding_window=False),
    "llama-3.2-1b": dict(
        architectures=["LlamaForCausalLM"], model_type="llama", hidden_size=2048, intermediate_size=8192,
        num_hidden_layers=16, num_attention_heads=32, num_key_value_heads=8, head_dim=64, vocab_size=128256,
        rope_theta=500000.0, rms_norm_eps=1e-5, tie_word_embeddings=True, max_position_embeddings=131072,
        hidden_act="silu", bos_token_id=128000, eos_token_id=128001,
        rope_scaling=dict(factor=32.0, high_freq_factor=4.0, low_freq_factor=1.0,
                          original_max_position_embeddings=8192, rope_type="llama3")),
    "qwen3-0.6b": dict(
        architectures=["Qwen3ForCausalLM"], model_type="qwen3", hidden_size=1024, intermediate_size=3072,
        num_hidden_layers=28, num_attention_heads=16, num_key_value_heads=8, head_dim=128, vocab_size=151936,
        rope_theta=1000000.0, rms_norm_eps=1e-6, tie_word_embeddings=True, max_position_embeddings=40960,
        hidden_act="silu", bos_token_id=151643, eos_token_id=151645),
    "phi3-mini": dict(
        architectures=["Phi3ForCausalLM"], model_type="phi3", hidden_size=3072, intermediate_size=8192,
        num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=32, vocab_size=32064,
        rope_theta=10000.0, rms_norm_eps=1e-5, tie_word_embeddings=False, max_position_embeddings=4096,
        original_max_position_embeddings=4096, hidden_act="silu", bos_token_id=1, eos_token_id=32000,
        pad_token_id=32000, sliding_window=2047),
    "gemma2-2b": dict(
        architectures=["Gemma2ForCausalLM"], model_type="gemma2", hidden_size=2304, intermediate_size=9216,
        num_hidden_layers=26, num_attention_heads=8, num_key_value_heads=4, head_dim=256, vocab_size=256000,
        rope_theta=10000.0, rms_norm_eps=1e-6, tie_word_embeddings=True, max_position_embeddings=8192,
        hidden_activation="gelu_pytorch_tanh", hidden_act="gelu_pytorch_tanh", attn_logit_softcapping=50.0,
        final_logit_softcapping=30.0, query_pre_attn_scalar=256, sliding_window=4096, bos_token_id=2,
        eos_token_id=1, pad_token_id=0),
    "mistral-7b": dict(
        architectures=["MistralForCausalLM"], model_type="mistral", hidden_size=4096, intermediate_size=14336,
        num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8, vocab_size=32768,
        rope_theta=1000000.0, rms_norm_eps=1e-5, tie_word_embeddings=False, max_position_embeddings=32768,
        hidden_act="silu", bos_token_id=1, eos_token_id=2, sliding_window=None),
    "phi4-mini": dict(
        architectures=["Phi3ForCausalLM"], model_type="phi3", hidden_size=3072, intermediate_size=8192,
        num_hidden_layers=32, num_attention_heads=24, num_key_value_heads=8, vocab_size=200064,
        rope_theta=10000.0, rms_norm_eps=1e-5, tie_word_embeddings=True, max_position_embeddings=131072,
        original_max_position_embeddings=4096, partial_rotary_factor=0.75,
        rope_scaling=dict(type="longrope", long_factor=[1.0 + 0.1 * i for i in range(48)], short_factor=[1.0] * 48),
        hidden_act="silu", bos_token_id=199999, eos_token_id=199999, pad_token_id=199999, sliding_window=262144),
    "smollm3-3b": dict(
        architectures=["SmolLM3ForCausalLM"], model_type="smollm3", hidden_size=2048, intermediate_size=11008,
        num_hidden_layers=36, num_attention_heads=16, num_key_value_heads=4, vocab_size=128256,
        rope_theta=5000000.0, rms_norm_eps=1e-6, tie_word_embeddings=True, max_position_embeddings=65536,
        hidden_act="silu", bos_token_id=128000, eos_token_id=128012, no_rope_layer_interval=4),
    "granite-2b": dict(
        architectures=["GraniteForCausalLM"], model_type="granite", hidden_size=2048, intermediate_size=8192,
        num_hidden_layers=40, num_attention_heads=32, num_key_value_heads=8, vocab_size=49155,
        rope_theta=5000000.0, rms_norm_eps=1e-5, tie_word_embeddings=True, max_position_embeddings=131072,
        hidden_act="silu", embedding_multiplier=12.0, residual_multiplier=0.22, attention_multiplier=0.015625,
        logits_scaling=8.0, bos_token_id=0, eos_token_id=0, pad_token_id=0),
    "olmo-1b": dict(
        architectures=["OlmoForCausalLM"], model_type="olmo", hidden_size=2048, intermediate_size=8192,
        num_hidden_layers=16, num_attention_heads=16, num_key_value_heads=16, vocab_size=50304,
        rope_theta=10000.0, tie_word_embeddings=True, max_position_embeddings=4096, hidden_act="silu",
        bos_token_id=None, eos_token_id=50279, pad_token_id=1),
    "phi2": dict(
        architectures=["PhiForCausalLM"], model_type="phi", hidden_size=2560, intermediate_size=10240,
        num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=32, vocab_size=51200,
        rope_theta=10000.0, partial_rotary_factor=0.4, layer_norm_eps=1e-5, tie_word_embeddings=False,
        max_position_embeddings=2048, hidden_act="gelu_new", bos_token_id=50256, eos_token_id=50256),
    "nemotron-4b": dict(
        architectures=["NemotronForCausalLM"], model_type="nemotron", hidden_size=3072, intermediate_size=9216,
        num_hidden_layers=32, num_attention_heads=24, num_key_value_heads=8, head_dim=128, vocab_size=256000,
        rope_theta=10000.0, partial_rotary_factor=0.5, norm_eps=1e-5, tie_word_embeddings=False,
        max_position_embeddings=4096, hidden_act="relu2", bos_token_id=2, eos_token_id=3),
    # openai/gpt-oss-20b's config.json. Written as that checkpoint is (bfloat16, the experts as MXFP4
    # `*_blocks` / `*_scales`: write_gpt_oss), the only form the builder's gpt-oss loader reads.
    "gpt-oss-20b": dict(
        architectures=["GptOssForCausalLM"], model_type="gpt_oss", hidden_size=2880, intermediate_size=2880,
        num_hidden_layers=24, num_attention_heads=64, num_key_value_heads=8, head_dim=64, vocab_size=201088,
        num_local_experts=32, num_experts_per_tok=4, sliding_window=128,
        layer_types=["sliding_attention", "full_attention"] * 12, swiglu_limit=7.0, attention_bias=True,
        rms_norm_eps=1e-5, tie_word_embeddings=False, max_position_embeddings=131072, hidden_act="silu",
        initializer_range=0.02, router_aux_loss_coef=0.9, eos_token_id=200002, pad_token_id=199999,
        rope_parameters=dict(rope_type="yarn", rope_theta=150000.0, factor=32.0, beta_fast=32.0, beta_slow=1.0,
                             truncate=False, original_max_position_embeddings=4096),
        dtype="bfloat16"),
    # microsoft/Phi-3.5-MoE-instruct's (16 experts top-2, sparse mixer, LongRoPE; the factors are stand-ins).
    "phi3.5-moe": dict(
        architectures=["PhiMoEForCausalLM"], model_type="phimoe", hidden_size=4096, intermediate_size=6400,
        num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8, vocab_size=32064,
        num_local_experts=16, num_experts_per_tok=2, rope_theta=10000.0, rms_norm_eps=1e-5,
        tie_word_embeddings=False, max_position_embeddings=131072, original_max_position_embeddings=4096,
        attention_bias=True, lm_head_bias=True, sliding_window=131072, router_jitter_noise=0.01,
        input_jitter_noise=0.01, router_aux_loss_coef=0.0, hidden_act="silu", bos_token_id=1, eos_token_id=32000,
        rope_scaling=dict(type="longrope", long_factor=[1.0 + 0.05 * i for i in range(64)], short_factor=[1.0] * 64,
                          long_mscale=1.243163121016122, short_mscale=1.243163121016122,
                          original_max_position_embeddings=4096),
        dtype="bfloat16"),
}
# gpt-oss's random MXFP4 experts: uniform random e2m1 codes (sign-symmetric, so zero-mean weights of RMS
# sqrt(68.5 / 8) = 2.93 in code units) and e8m0 block exponents 2^-8 or 2^-7 at random: weights of RMS 0.018,
# transformers' own initializer_range (0.02) for these matrices, so activations stay their usual size through
# the layers; the router (a dense layer, transformers' initialisation) spreads tokens over the experts.
MXFP4_SCALE_EXPONENTS = (119, 120)
MXFP4_BLOCK = 32


def write_tokenizer(dst: str) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    tk = Tokenizer(models.WordLevel(vocab={f"t{i}": i for i in range(512)}, unk_token="t0"))
    tk.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=tk, unk_token="t0", bos_token="t1", eos_token="t2",
                            pad_token="t3").save_pretrained(dst)


def write_checkpoint(name: str, dst: str, layers: int | None = None) -> None:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    cfg = dict(CONFIGS[name])
    architectures, model_type = cfg.pop("architectures"), cfg.pop("model_type")
    dtype = getattr(torch, cfg.pop("dtype", "float32"))
    if layers is not None:
        cfg["num_hidden_layers"] = layers
        if "layer_types" in cfg:
            cfg["layer_types"] = cfg["layer_types"][:layers]
    config = AutoConfig.for_model(model_type, **cfg)
    config.architectures = architectures
    if model_type == "gpt_oss":
        write_gpt_oss(config, dst, dtype)
        write_tokenizer(dst)
        return
    torch.manual_seed(1234)
    model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 1:
                p.add_(torch.randn_like(p) * 0.1)
    model.save_pretrained(dst, safe_serialization=True)
    set_architectures(dst, architectures)
    write_tokenizer(dst)


def set_architectures(dst: str, architectures: list) -> None:
    """config.json's `architectures` as the real checkpoint spells them: save_pretrained writes the class
    name (transformers' PhimoeForCausalLM where Phi-3.5-MoE's checkpoint, and the builder, say
    PhiMoEForCausalLM)."""
    import json
    import os

    path = os.path.join(dst, "config.json")
    with open(path) as f:
        written = json.load(f)
    if written.get("architectures") != architectures:
        written["architectures"] = architectures
        with open(path, "w") as f:
            json.dump(written, f, indent=2)


def mxfp4(gen, experts: int, rows: int, cols: int) -> tuple:
    """Random MXFP4 tensors of `experts` matrices of `rows` outputs by `cols` inputs, as gpt-oss's checkpoint
    stores them: blocks uint8 [E, rows, cols/32, 16] (two e2m1 codes a byte, the lower-index one in the low
    nibble) and scales uint8 [E, rows, cols/32] (e8m0: 2^(s - 127) a block of 32)."""
    import torch

    nb = cols // MXFP4_BLOCK
    blocks = torch.randint(0, 256, (experts, rows, nb, MXFP4_BLOCK // 2), generator=gen, dtype=torch.uint8)
    lo, hi = MXFP4_SCALE_EXPONENTS
    scales = torch.randint(lo, hi + 1, (experts, rows, nb), generator=gen, dtype=torch.uint8)
    return blocks, scales


def write_gpt_oss(config, dst: str, dtype) -> None:
    """gpt-oss as openai/gpt-oss-20b's checkpoint is written: every tensor but the experts in `dtype` with
    transformers' initialisation (1-D ones moved as in write_checkpoint), the experts' weights as MXFP4
    (`model.layers.N.mlp.experts.{gate_up,down}_proj_{blocks,scales}`; gate_up's rows interleave gate and
    up as transformers' GptOssExperts does), their biases [E, 2I] / [E, H] in `dtype` moved by N(0, 0.1)
    like the other biases, `quantization_config: {quant_method: mxfp4}`; one safetensors file per layer
    and an index. The dense float experts are never made (E x 3 x H x I floats a layer: 3.2 GB at
    gpt-oss-20b's widths): the model transformers initialises has 32-wide experts, dropped."""
    import copy
    import json
    import os

    import torch
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM, GenerationConfig

    e, h, inter = config.num_local_experts, config.hidden_size, config.intermediate_size
    assert h % MXFP4_BLOCK == 0 and inter % MXFP4_BLOCK == 0, "MXFP4 blocks are 32 wide"
    stand_in = copy.deepcopy(config)
    stand_in.intermediate_size = MXFP4_BLOCK
    torch.manual_seed(1234)
    model = AutoModelForCausalLM.from_config(stand_in, dtype=dtype)
    state = {k: v for k, v in model.state_dict().items() if ".mlp.experts." not in k}
    del model
    with torch.no_grad():
        for v in state.values():
            if v.dim() == 1:
                v.add_(torch.randn_like(v) * 0.1)
    gen = torch.Generator().manual_seed(1234)
    os.makedirs(dst, exist_ok=True)
    n = config.num_hidden_layers
    files = [f"model-{i:05d}-of-{n + 1:05d}.safetensors" for i in range(1, n + 2)]
    weight_map, total = {}, 0

    def save(tensors: dict, file: str) -> None:
        nonlocal total
        tensors = {k: v.contiguous() for k, v in tensors.items()}
        save_file(tensors, os.path.join(dst, file), metadata={"format": "pt"})
        for k, v in tensors.items():
            weight_map[k] = file
            total += v.numel() * v.element_size()

    for layer in range(n):
        prefix = f"model.layers.{layer}."
        tensors = {k: state.pop(k) for k in [k for k in state if k.startswith(prefix)]}
        experts = prefix + "mlp.experts."
        tensors[experts + "gate_up_proj_blocks"], tensors[experts + "gate_up_proj_scales"] = mxfp4(gen, e, 2 * inter, h)
        tensors[experts + "down_proj_blocks"], tensors[experts + "down_proj_scales"] = mxfp4(gen, e, h, inter)
        tensors[experts + "gate_up_proj_bias"] = (torch.randn(e, 2 * inter, generator=gen) * 0.1).to(dtype)
        tensors[experts + "down_proj_bias"] = (torch.randn(e, h, generator=gen) * 0.1).to(dtype)
        save(tensors, files[layer])
    save(state, files[n])
    with open(os.path.join(dst, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}, f, indent=2)
    config.save_pretrained(dst)
    GenerationConfig.from_model_config(config).save_pretrained(dst)
    path = os.path.join(dst, "config.json")
    with open(path) as f:
        written = json.load(f)
    written["quantization_config"] = {
        "modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens",
                                   "lm_head"],
        "quant_method": "mxfp4"}
    written["dtype"] = str(dtype).removeprefix("torch.")
    with open(path, "w") as f:
        json.dump(written, f, indent=2)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("name", choices=sorted(CONFIGS))
    ap.add_argument("out_dir")
    ap.add_argument("--layers", type=int, default=None)
    a = ap.parse_args()
    if a.layers is not None and a.layers < 1:
        ap.error("--layers must be at least 1")
    write_checkpoint(a.name, a.out_dir, a.layers)


if __name__ == "__main__":
    main()
