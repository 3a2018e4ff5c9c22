"""The workload registry: name -> WorkloadInfo. Importing this module never imports torch.

A workload's ``impl`` is a ``build(params, ctx) -> TrainingSetup`` function (see
:mod:`diageval.recording.workloads.base`), imported only inside a rank process at record time.
"""

from __future__ import annotations

from diageval.recording.plugin import WorkloadInfo
from diageval.recording.workloads.params import ConvParams, InferenceParams, MlpParams, TransformerParams

WORKLOADS: dict[str, WorkloadInfo] = {
    "mlp_ddp": WorkloadInfo(
        name="mlp_ddp",
        summary="A small MLP classifier trained with DistributedDataParallel on synthetic data",
        params_model=MlpParams,
        impl="diageval.recording.workloads.mlp:build",
    ),
    "convnet_allreduce": WorkloadInfo(
        name="convnet_allreduce",
        summary="A small conv net on synthetic images; gradients averaged with one flat all_reduce per step",
        params_model=ConvParams,
        impl="diageval.recording.workloads.convnet:build",
    ),
    "transformer_lm": WorkloadInfo(
        name="transformer_lm",
        summary="A small decoder-only transformer LM on variable-length token sequences, with DistributedDataParallel",
        params_model=TransformerParams,
        impl="diageval.recording.workloads.transformer:build",
    ),
    "inference": WorkloadInfo(
        name="inference",
        summary="A small MLP, conv net or LM run forward only in eval mode (no DDP), with an inner loop of "
                "generation or denoising calls per step and its input from a DataLoader or decoded inline",
        params_model=InferenceParams,
        impl="diageval.recording.workloads.inference:build",
    ),
}
