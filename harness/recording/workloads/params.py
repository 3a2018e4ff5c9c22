"""Strict parameter models of the built-in workloads (pydantic only: importing this never imports torch).

Every workload shares :class:`CommonParams`: how often the training script logs and checkpoints, how many
steps the profiler records, and how expensive producing one batch is. Those knobs exist so that a healthy
run already loads data through a ``DataLoader``, saves checkpoints now and then and logs like a real
training script: an injected fault changes the *magnitude or timing* of these events, never their presence.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class CommonParams(BaseModel):
    model_config = ConfigDict(extra="forbid")

    batch_size: int = Field(64, ge=1, le=4096, description="Samples per rank per step")
    loader_workers: int = Field(2, ge=0, le=8, description="DataLoader worker processes per rank")
    batch_prep_ms: float = Field(1.0, ge=0, le=1000, description="Time a worker spends preparing one batch")
    checkpoint_every: int = Field(10, ge=1, description="Save a checkpoint every N steps")
    log_every: int = Field(5, ge=1, description="Print a loss line every N steps")
    trace_steps: int = Field(12, ge=1, le=200, description="Steps the profiler records (the last ones of the run)")
    lr: float = Field(0.01, gt=0, le=10)


class MlpParams(CommonParams):
    in_features: int = Field(256, ge=1, le=8192)
    hidden: int = Field(512, ge=1, le=8192)
    layers: int = Field(3, ge=1, le=32, description="Hidden layers")
    classes: int = Field(10, ge=2, le=1000)
    vocab: int = Field(1000, ge=2, le=1_000_000, description="Buckets of the hashed categorical input column")
    embed_dim: int = Field(16, ge=1, le=1024)


class ConvParams(CommonParams):
    batch_size: int = Field(32, ge=1, le=4096, description="Samples per rank per step")
    image_size: int = Field(16, ge=8, le=256)
    channels: int = Field(16, ge=2, le=512, description="Channels of the conv layers")
    classes: int = Field(10, ge=2, le=1000)


class TransformerParams(CommonParams):
    batch_size: int = Field(8, ge=1, le=4096, description="Sequences per rank per step")
    lr: float = Field(0.003, gt=0, le=10)
    trace_steps: int = Field(8, ge=1, le=200, description="Steps the profiler records (the last ones of the run); "
                             "fewer than the others' default: an LM step records ~1000 ops")
    vocab: int = Field(256, ge=8, le=1_000_000, description="Token vocabulary size")
    dim: int = Field(128, ge=8, le=4096, description="Model width (embedding size)")
    heads: int = Field(4, ge=1, le=64, description="Attention heads per block (must divide dim)")
    layers: int = Field(2, ge=1, le=48, description="Transformer blocks")
    mlp_ratio: int = Field(4, ge=1, le=8, description="Width of each block's MLP, in multiples of dim")
    min_seq_len: int = Field(32, ge=2, le=1024, description="Shortest padded length a batch may have")
    max_seq_len: int = Field(64, ge=2, le=1024, description="Longest padded length a batch may have")

    @model_validator(mode="after")
    def _shapes_fit(self) -> "TransformerParams":
        if self.dim % self.heads:
            raise ValueError(f"heads ({self.heads}) must divide dim ({self.dim})")
        if self.min_seq_len > self.max_seq_len:
            raise ValueError(f"min_seq_len ({self.min_seq_len}) is above max_seq_len ({self.max_seq_len})")
        return self


class InferenceParams(CommonParams):
    """The ``inference`` workload (workloads/inference.py): forward only, eval mode, no DDP."""

    model: Literal["mlp", "convnet", "lm"] = Field("mlp", description="The network: the tabular MLP, the dense conv "
                                                   "net or the decoder LM of the training workloads")
    calls_per_step: int = Field(1, ge=1, le=256, description="Dependent forward calls per step: tokens generated "
                                "(lm) or denoising passes (mlp, convnet)")
    input: Literal["loader", "inline"] = Field("loader", description="loader: ready tensors through a prefetching "
                                               "DataLoader; inline: encoded requests decoded on the main thread in the "
                                               "step (no DataLoader)")
    width: int = Field(64, ge=2, le=4096, description="Hidden size (mlp), channels (convnet) or model width (lm)")
    layers: int = Field(2, ge=1, le=32, description="Hidden layers (mlp) or transformer blocks (lm)")
    in_features: int = Field(64, ge=2, le=8192, description="mlp: features per input row")
    image_size: int = Field(16, ge=8, le=256, description="convnet: the size the model reads")
    raw_image_size: int = Field(32, ge=8, le=1024, description="convnet, inline: the size a request's image arrives "
                                "in (resized to image_size in the step)")
    vocab: int = Field(256, ge=8, le=1_000_000, description="lm: token vocabulary size")
    heads: int = Field(4, ge=1, le=64, description="lm: attention heads (must divide width)")
    prompt_len: int = Field(16, ge=2, le=1024, description="lm: prompt tokens per sequence")
    trace_steps: int = Field(4, ge=1, le=200, description="Steps the profiler records (the last ones of the run)")
    checkpoint_every: int = Field(1_000_000_000, ge=1, description="An inference job saves nothing: past any run")

    @model_validator(mode="after")
    def _shapes_fit(self) -> "InferenceParams":
        if self.model == "lm" and self.width % self.heads:
            raise ValueError(f"heads ({self.heads}) must divide width ({self.width})")
        if self.model == "lm" and self.prompt_len + self.calls_per_step > 4096:
            raise ValueError(f"prompt_len + calls_per_step ({self.prompt_len + self.calls_per_step}) is past the "
                             "4096 positions the LM has")
        return self
