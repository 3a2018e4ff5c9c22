"""The one Kineto vocabulary: step markers of every torch version, CUDA/HIP calls, communication kernels."""

from __future__ import annotations

from diageval.bundle import kineto as K


def test_step_markers_of_every_torch_version_and_not_the_device_copy():
    assert K.profiler_step_number("ProfilerStep#12") == 12 and "user_annotation" in K.STEP_MARKER_CATEGORIES
    assert K.profiler_step_number("ProfilerStep#5") == 5 and "Operator" in K.STEP_MARKER_CATEGORIES  # torch 1.8/1.9
    assert "gpu_user_annotation" not in K.STEP_MARKER_CATEGORIES
    assert K.profiler_step_number("ProfilerStep#x") is None


def test_runtime_calls_of_cuda_and_rocm():
    for name in ("cudaLaunchKernel", "cuLaunchKernel", "hipLaunchKernel", "hipExtModuleLaunchKernel"):
        assert name in K.LAUNCH_NAMES, name
    assert {"hipFree", "cudaFree"} <= K.FREE_NAMES
    assert {"hipStreamSynchronize", "cudaDeviceSynchronize"} <= K.SYNC_NAMES
    assert {"Runtime", "cuda_runtime", "mtia_runtime"} <= K.RUNTIME_CATEGORIES
    assert {"Kernel", "kernel", "Memcpy", "gpu_memcpy", "mtia_ccp_events"} <= K.DEVICE_CATEGORIES


def test_communication_kernels_old_and_new_names():
    for name in (
        "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)",
        "ncclDevKernel_Generic(ncclDevKernelArgsStorage<4096ul>)",
        "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
        "void deep_ep::intranode::dispatch<8, 768>(int4*, float*)",
    ):
        assert K.is_comm_kernel(name), name
        assert K.kernel_class("kernel", name) == "communication"
    assert not K.is_comm_kernel("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float> >")


def test_kernel_classes():
    assert K.kernel_class("kernel", "ampere_sgemm_128x64_tn") == "gemm"
    assert K.kernel_class("kernel", "Cijk_Ailk_Bljk_BBS_BH_MT32x32x64_MI16x16x16x1_SN") == "gemm"
    assert K.kernel_class("Kernel", "void cudnn::detail::implicit_convolve_sgemm<float>(int)") == "conv"
    assert K.kernel_class("kernel", "void at::native::vectorized_elementwise_kernel<4, AddFunctor>(int)") == "elementwise"
    assert K.kernel_class("gpu_memcpy", "Memcpy DtoH (Device -> Pageable)") == "memcpy"
    assert K.kernel_class("Memset", "Memset (Device)") == "memset"
