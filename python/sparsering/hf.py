"""A Hugging Face transformers attention backend: after `import sparsering.hf`,

    model = AutoModelForCausalLM.from_config(config, attn_implementation="sparsering")

runs the attention of Qwen2 / Llama models (any model that dispatches through transformers'
AttentionInterface) through sparsering's kernels with MTraining's online vertical-slash pattern
("vs-online:0.95" unless the model's config has a `sparsering_pattern`, or set_pattern() says otherwise).
A synthetic source (such as "vs-topp:0.95") gives each decoder layer its own pattern: layer i (the attention
module's layer_idx) of a config.num_hidden_layers-layer model, the heads `sparsering-exec train --pattern P` runs in
its layer i at the same length, drawn from seed 0 (the trainer's default --seed) unless the config has a
`sparsering_seed`. A module without layer_idx runs layer 0 of 1. vs-online is estimated from each layer's own Q and K.
The backward runs the fastest kernels unless set_deterministic(True), a config's `sparsering_deterministic`
= True or torch.use_deterministic_algorithms(True) asks for the bit-reproducible ones
(sparsering.torch.sparse_attention's deterministic).

The backend is causal over whole, unpadded sequences (the training case): the attention mask transformers
passes is not read (none is built for it where transformers' mask registry allows). Dropout is not applied.
Query, key and value arrive as [B, heads, N, D]; the kernels take [B, N, heads, D] (sparsering.torch), in bf16
(fp32 or fp16 CUDA inputs, as autocast may give, are converted and the output converted back).
"""
import torch

from . import torch as _st

NAME = "sparsering"
DEFAULT_PATTERN = "vs-online:0.95"
_pattern = None
_deterministic = False


def set_pattern(pattern):
    """The pattern every layer runs (a source string, a VSPattern, or None for the config's / the default)."""
    global _pattern
    _pattern = pattern


def set_deterministic(on=True):
    """Every layer's backward without float atomics (gradients repeat bit for bit; slower), or (False) as the
    config / torch's deterministic mode say."""
    global _deterministic
    _deterministic = bool(on)


def layer_of(module):
    """(layer, num_layers) of a transformers attention module: its layer_idx of its config's num_hidden_layers, or
    (None, None) (layer 0 of 1) when it has either not."""
    layer = getattr(module, "layer_idx", None)
    layers = getattr(getattr(module, "config", None), "num_hidden_layers", None)
    return (None, None) if layer is None or layers is None else (int(layer), int(layers))


def sparsering_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """transformers' attention-function signature: returns (attn_output [B, N, H, D], None)."""
    config = getattr(module, "config", None)
    layer, num_layers = layer_of(module)
    seed = int(getattr(config, "sparsering_seed", 0) or 0)
    pattern = _pattern
    if pattern is None:
        pattern = getattr(config, "sparsering_pattern", None) or DEFAULT_PATTERN
    deterministic = _deterministic or bool(getattr(config, "sparsering_deterministic", False))
    # under autocast the rotary embedding may hand over fp32: the kernels take bf16 (the output goes back)
    cast = query.is_cuda and query.dtype != torch.bfloat16
    q, k, v = (x.transpose(1, 2).to(torch.bfloat16) if cast else x.transpose(1, 2) for x in (query, key, value))
    out = _st.sparse_attention(q, k, v, pattern, scale=scaling, deterministic=deterministic, seed=seed, layer=layer,
                               num_layers=num_layers)
    return (out.to(query.dtype) if cast else out), None


def _no_mask(*args, **kwargs):
    """The mask function of the backend: none (attention is causal in the kernels)."""
    return None


def register():
    """Register attn_implementation="sparsering" (done on import)."""
    from transformers import AttentionInterface

    AttentionInterface.register(NAME, sparsering_attention)
    try:  # transformers >= 4.53 builds masks per implementation; ours needs none
        from transformers.masking_utils import AttentionMaskInterface

        AttentionMaskInterface.register(NAME, _no_mask)
    except ImportError:
        pass


register()
