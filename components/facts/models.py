"""The shape of a model, as data: what memory, parallelism and cost checks need to know.

`ModelShape` holds the figures of a Hugging Face `config.json` that size a dense decoder-only
transformer; `parameter_count` is computed from them, never copied. `DEFAULT_MODEL` is the
model the program stages by default (components/facts/pins.py), so an offline plan and the tests
know its shape without reaching the Hugging Face API; another model's shape is read from its
`config.json` at preview (`ModelShape.from_config_json`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from components.facts.pins import STAGING_MODEL_ID, STAGING_MODEL_REVISION

# Bytes of one element per `torch_dtype` string a config.json carries.
DTYPE_BYTES: dict[str, int] = {"bfloat16": 2, "float16": 2, "float32": 4}

# Model types whose attention projections q, k and v carry a bias although their config.json
# has no `attention_bias` key: transformers' Qwen2Attention builds q/k/v_proj with bias=True
# (huggingface/transformers src/transformers/models/qwen2/modeling_qwen2.py, `Qwen2Attention`).
_QKV_BIAS_MODEL_TYPES = frozenset({"qwen2"})


@dataclass(frozen=True)
class ModelShape:
    """The figures of one model revision that size its memory, parallelism and compute."""

    model_id: str  # Hugging Face repository, e.g. "Qwen/Qwen2.5-32B-Instruct"
    revision: str  # the commit the figures were read at
    model_type: str  # config.json `model_type`, e.g. "qwen2"
    num_attention_heads: int
    num_key_value_heads: int
    num_hidden_layers: int
    hidden_size: int
    intermediate_size: int
    vocab_size: int
    tie_word_embeddings: bool
    torch_dtype: str  # the dtype the weights are stored in
    head_dim: int  # config.json `head_dim`, else hidden_size / num_attention_heads
    qkv_bias: bool  # q, k and v projections carry a bias
    max_position_embeddings: int

    @property
    def parameter_count(self) -> int:
        """Parameters of a dense decoder with a gated (SwiGLU) MLP and RMSNorm, from the shape.

        Per layer: q and o projections hidden x (heads x head_dim), k and v hidden x (KV heads x
        head_dim), each of q/k/v plus its bias where the model has one; gate, up and down
        projections hidden x intermediate; two norms of hidden. Plus the input embedding, the LM
        head unless tied, and the final norm. For Qwen2.5-32B this gives 32,763,876,352, the
        figure the review's appendix rounds to 32.8e9 (../shared/reference/TRAINING-REVIEW.md).
        """
        q_width = self.num_attention_heads * self.head_dim
        kv_width = self.num_key_value_heads * self.head_dim
        attention = 2 * self.hidden_size * q_width + 2 * self.hidden_size * kv_width
        if self.qkv_bias:
            attention += q_width + 2 * kv_width
        mlp = 3 * self.hidden_size * self.intermediate_size
        layer = attention + mlp + 2 * self.hidden_size
        embeddings = self.vocab_size * self.hidden_size
        lm_head = 0 if self.tie_word_embeddings else embeddings
        return self.num_hidden_layers * layer + embeddings + lm_head + self.hidden_size

    @property
    def dtype_bytes(self) -> int:
        """Bytes of one weight as stored (2 for bfloat16)."""
        return DTYPE_BYTES[self.torch_dtype]

    @property
    def weight_bytes(self) -> int:
        """Bytes of the weights as stored: what staging downloads and vLLM loads."""
        return self.parameter_count * self.dtype_bytes

    def bytes_at(self, bytes_per_param: int) -> int:
        """Bytes of every parameter at `bytes_per_param` (4 for fp32 master weights)."""
        return self.parameter_count * bytes_per_param

    @classmethod
    def from_config_json(cls, model_id: str, revision: str, config: dict[str, Any]) -> ModelShape:
        """The shape a Hugging Face `config.json` describes; KeyError names a missing key.

        A multimodal config keeps its language model under `text_config`; that is the part
        that is sharded and served, so it is read when present.
        """
        text = config.get("text_config") or config
        heads = int(text["num_attention_heads"])
        hidden = int(text["hidden_size"])
        model_type = str(text.get("model_type") or config.get("model_type") or "")
        return cls(
            model_id=model_id,
            revision=revision,
            model_type=model_type,
            num_attention_heads=heads,
            # Absent in configs of models without grouped-query attention (transformers
            # defaults it to num_attention_heads, e.g. LlamaConfig.__init__).
            num_key_value_heads=int(text.get("num_key_value_heads") or heads),
            num_hidden_layers=int(text["num_hidden_layers"]),
            hidden_size=hidden,
            intermediate_size=int(text["intermediate_size"]),
            vocab_size=int(text["vocab_size"]),
            tie_word_embeddings=bool(
                text.get("tie_word_embeddings", config.get("tie_word_embeddings", False))
            ),
            torch_dtype=str(text.get("torch_dtype") or config.get("torch_dtype") or "bfloat16"),
            head_dim=int(text.get("head_dim") or hidden // heads),
            qkv_bias=bool(text.get("attention_bias", model_type in _QKV_BIAS_MODEL_TYPES)),
            max_position_embeddings=int(text.get("max_position_embeddings") or 0),
        )


# Qwen/Qwen2.5-32B-Instruct at the pinned revision. Every figure is that revision's config.json
# (huggingface.co/Qwen/Qwen2.5-32B-Instruct/blob/<revision>/config.json, as quoted in public
# copies of the file; the model card agrees: "Number of Layers: 64", "Number of Attention Heads
# (GQA): 40 for Q and 8 for KV"). head_dim is not in the file: 5120 / 40 = 128. qkv_bias: the
# qwen2 architecture (see _QKV_BIAS_MODEL_TYPES). The card's "32.5B" parameters is a rounding;
# the count computed from this shape is 32,763,876,352.
DEFAULT_MODEL = ModelShape(
    model_id=STAGING_MODEL_ID,
    revision=STAGING_MODEL_REVISION,
    model_type="qwen2",
    num_attention_heads=40,
    num_key_value_heads=8,
    num_hidden_layers=64,
    hidden_size=5120,
    intermediate_size=27648,
    vocab_size=152064,
    tie_word_embeddings=False,
    torch_dtype="bfloat16",
    head_dim=128,
    qkv_bias=True,
    max_position_embeddings=32768,
)
