"""A Hugging Face checkpoint with a real model's configuration and seeded random weights, for
onnxruntime-genai's model builder (no download: the configurations are written out here).

    python hf_random_checkpoint.py NAME OUT_DIR [--layers N]

NAME is one of CONFIGS (the shapes of the models users run through the builder: the decoder families
it writes differently: packed or split QKV, biases, q/k norms, windows and softcaps, partial and LongRoPE
rotary, LayerNorm and relu2 / GELU MLPs, untied heads). Gemma-3 is not among them: builder 0.18.0 reads
`rope_parameters["rope_type"]`, which transformers 5 nests per layer type for Gemma-3; and it fails on
SmolLM3's NoPE layers (every fourth; `KeyError: 'position_ids'`), so SmolLM3 builds with up to 3 layers. `--layers N` keeps the real widths but only N decoder layers (a quicker model
for the checks; the full depth for timings). Weights are the transformers library's own
initialisation (seed 1234); every 1-D weight (norms, biases) is then moved by N(0, 0.1) so that a
norm or bias applied wrongly shows in the logits. The tokenizer is a placeholder word-level one of 512
entries (the builder copies a tokenizer; random-weight models are driven by token ids).

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
}


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
    if layers is not None:
        cfg["num_hidden_layers"] = layers
    config = AutoConfig.for_model(model_type, **cfg)
    config.architectures = architectures
    torch.manual_seed(1234)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 1:
                p.add_(torch.randn_like(p) * 0.1)
    model.save_pretrained(dst, safe_serialization=True)
    write_tokenizer(dst)


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
