"""The shape of a model, as data: what memory, parallelism and cost checks need to know.

`ModelShape` holds the figures of a Hugging Face `config.json` that size a decoder-only
transformer, dense or a mixture of experts (MoE); `parameter_count` is computed from them, or
taken from the checkpoint's `model.safetensors.index.json` (`metadata.total_size`, the bytes of
every tensor stored, exact for any architecture) when it was read. `DEFAULT_MODEL` is the model
the program stages by default (components/facts/pins.py), so an offline plan and the tests know
its shape without reaching the Hugging Face API; another model's shape is read from its files
(`ModelShape.from_config_json`, components/preflight/model_shape.py).

A MoE model is counted with its experts: every expert's weights are held by FSDP and vLLM
(`parameter_count`), while a token passes through `experts_per_token` of them
(`active_parameter_count`, what per-token compute and activations follow). Families whose
config this module reads are `MOE_MODEL_TYPES`; a config of another MoE family is refused
(`UnreadMoe`), since its layer layout (shared experts, dense layers, latent attention) is not
known here and a dense count would be ten times low (TRAINING-REVIEW-2.md finding 4).
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

# config.json keys that announce routed experts, across Hugging Face model families
# (transformers' Qwen3MoeConfig/Qwen2MoeConfig `num_experts`, MixtralConfig `num_local_experts`,
# DeepseekV3Config `n_routed_experts`).
EXPERT_KEYS = ("num_experts", "num_local_experts", "n_routed_experts")
# MoE families whose layer layout is read here, each as transformers builds it:
# - qwen3_moe, qwen2_moe: a layer is sparse unless listed in `mlp_only_layers`, and when
#   (index + 1) % decoder_sparse_step == 0 (modeling_qwen3_moe.py Qwen3MoeDecoderLayer); experts
#   of `moe_intermediate_size`, a router of hidden x experts; qwen2_moe adds one shared expert of
#   `shared_expert_intermediate_size` and its 1-wide gate (modeling_qwen2_moe.py);
# - mixtral: every layer sparse, experts of `intermediate_size` (modeling_mixtral.py).
MOE_MODEL_TYPES = frozenset({"qwen3_moe", "qwen2_moe", "mixtral"})


class UnreadMoe(ValueError):
    """A MoE config of a family whose parameters this module cannot count."""


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
    # Mixture of experts (0 for a dense model): experts per sparse layer, experts a token goes
    # through, one expert's MLP width, a shared expert's width, and how many layers are sparse.
    num_experts: int = 0
    experts_per_token: int = 0
    moe_intermediate_size: int = 0
    shared_expert_intermediate_size: int = 0
    sparse_layers: int = 0
    # Bytes of every stored tensor, from model.safetensors.index.json; None: not read.
    stored_bytes: int | None = None

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def parameter_count(self) -> int:
        """Every parameter: the safetensors index's bytes / the dtype's when it was read (exact),
        else counted from the shape (`counted_parameters`)."""
        if self.stored_bytes:
            return self.stored_bytes // self.dtype_bytes
        return self.counted_parameters(self.num_experts)

    @property
    def active_parameter_count(self) -> int:
        """Parameters a token passes through: all of a dense model's; a MoE model's attention,
        embeddings and `experts_per_token` experts per sparse layer. What per-token FLOPs
        follow (tools/step_model.py)."""
        if not self.is_moe:
            return self.parameter_count
        return self.counted_parameters(self.experts_per_token)

    @property
    def mlp_width_per_token(self) -> int:
        """The MLP width one token's activations span in the widest layer: the dense
        intermediate size, or in a sparse layer its experts' and the shared expert's widths."""
        if not self.is_moe:
            return self.intermediate_size
        sparse = (self.experts_per_token * self.moe_intermediate_size
                  + self.shared_expert_intermediate_size)
        dense = self.intermediate_size if self.sparse_layers < self.num_hidden_layers else 0
        return max(sparse, dense)

    def counted_parameters(self, experts: int) -> int:
        """Parameters of a decoder with gated (SwiGLU) MLPs and RMSNorm, from the shape, with
        `experts` experts per sparse layer (a dense model has none).

        Per layer: q and o projections hidden x (heads x head_dim), k and v hidden x (KV heads x
        head_dim), each of q/k/v plus its bias where the model has one; gate, up and down
        projections hidden x intermediate; two norms of hidden. Plus the input embedding, the LM
        head unless tied, and the final norm. For Qwen2.5-32B this gives 32,763,876,352, the
        figure the review's appendix rounds to 32.8e9 (../shared/reference/TRAINING-REVIEW.md).
        A sparse layer's MLP is `experts` experts of hidden x moe_intermediate x 3, a router of
        hidden x num_experts and any shared expert (with its gate of hidden x 1); Qwen3's q/k
        norms (2 x head_dim per layer) are left out. Qwen3-30B-A3B counts 30.5B (3.3B active),
        Qwen3-235B-A22B 235.1B (22.2B active), Qwen's own "30.5B"/"3.3B" and "235B"/"22B".
        """
        q_width = self.num_attention_heads * self.head_dim
        kv_width = self.num_key_value_heads * self.head_dim
        attention = 2 * self.hidden_size * q_width + 2 * self.hidden_size * kv_width
        if self.qkv_bias:
            attention += q_width + 2 * kv_width
        dense_mlp = 3 * self.hidden_size * self.intermediate_size
        sparse_mlp = 0
        if self.is_moe:
            sparse_mlp = (experts * 3 * self.hidden_size * self.moe_intermediate_size
                          + self.hidden_size * self.num_experts)
            if self.shared_expert_intermediate_size:
                sparse_mlp += 3 * self.hidden_size * self.shared_expert_intermediate_size
                sparse_mlp += self.hidden_size
        dense_layers = self.num_hidden_layers - self.sparse_layers
        layers = (self.num_hidden_layers * (attention + 2 * self.hidden_size)
                  + dense_layers * dense_mlp + self.sparse_layers * sparse_mlp)
        embeddings = self.vocab_size * self.hidden_size
        lm_head = 0 if self.tie_word_embeddings else embeddings
        return layers + embeddings + lm_head + self.hidden_size

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
    def from_config_json(
        cls, model_id: str, revision: str, config: dict[str, Any],
        index: dict[str, Any] | None = None,
    ) -> ModelShape:
        """The shape a Hugging Face `config.json` describes, with the stored bytes of its
        `model.safetensors.index.json` when given; KeyError names a missing key, UnreadMoe a
        MoE family not in MOE_MODEL_TYPES.

        A multimodal config keeps its language model under `text_config`; that is the part
        that is sharded and served, so it is read when present.
        """
        text = config.get("text_config") or config
        heads = int(text["num_attention_heads"])
        hidden = int(text["hidden_size"])
        model_type = str(text.get("model_type") or config.get("model_type") or "")
        stored = None
        if index is not None:
            stored = int((index.get("metadata") or {})["total_size"])
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
            stored_bytes=stored,
            **_experts(model_type, text),
        )


def _experts(model_type: str, text: dict[str, Any]) -> dict[str, int]:
    """The MoE fields of a config (none for a dense one); UnreadMoe for an unread family."""
    key = next((k for k in EXPERT_KEYS if text.get(k)), None)
    if key is None:
        return {}
    if model_type not in MOE_MODEL_TYPES:
        raise UnreadMoe(
            f"a mixture-of-experts model (`{key}`: {text[key]}) of type {model_type!r}, whose "
            "layers this check cannot count (it reads "
            f"{', '.join(sorted(MOE_MODEL_TYPES))}); a dense count would be several times low"
        )
    layers = int(text["num_hidden_layers"])
    if model_type == "mixtral":
        width, sparse = int(text["intermediate_size"]), layers
    else:
        width = int(text["moe_intermediate_size"])
        step = int(text.get("decoder_sparse_step") or 1)
        dense_only = set(text.get("mlp_only_layers") or ())
        sparse = sum(1 for i in range(layers) if i not in dense_only and (i + 1) % step == 0)
    return {
        "num_experts": int(text[key]),
        "experts_per_token": int(text["num_experts_per_tok"]),
        "moe_intermediate_size": width,
        "shared_expert_intermediate_size": int(text.get("shared_expert_intermediate_size") or 0),
        "sparse_layers": sparse,
    }


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
