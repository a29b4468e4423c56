"""Published peak memory bandwidth and FLOP/s, per device as PyTorch sees it, with their sources.

The figures are those collected in the project's ``hardware-peaks.md`` (2026-12-03) from public
documents: **A** the AWS Neuron documentation (aws-neuron/aws-neuron-sdk,
``about-neuron/arch/neuron-hardware/{trainium,trainium2,trainium3}.rst`` and
``about-neuron/arch/neuron-features/logical-neuroncore-config.rst``); **S** stas00/ml-engineering
``compute/accelerator/README.md`` (vendor data sheets); **R** ROCm/ROCm ``gpu-arch-specs.rst``. FLOP/s
are *dense* (NVIDIA's sparse tensor rates halved) and the top rate of the dtype (tensor / matrix
units for 16-bit types), so an elementwise operation cannot reach the compute roof: its roof is
the bandwidth.

A Trainium *device* (what ``torch.device("neuron", i)`` names) is one logical NeuronCore: on Trn1
one NeuronCore-v2, half a chip; on Trn2 and Trn3, with the default logical-core setting of 2, two
of the chip's eight NeuronCores, a quarter of the chip (LNC=1: an eighth). No per-core share of
HBM bandwidth is published, so a device's bandwidth and FLOP/s are the chip's divided by the
devices that share it, and each figure says so.
"""

from __future__ import annotations

from dataclasses import dataclass

GB = 1e9

SOURCE_A = "AWS Neuron docs (aws-neuron-sdk, about-neuron/arch/neuron-hardware/{}.rst)"
SOURCE_S = "vendor data sheet, as collected in stas00/ml-engineering compute/accelerator"
SOURCE_R = "AMD ROCm docs (ROCm/ROCm docs/reference/gpu-arch-specs.rst)"


@dataclass(frozen=True)
class Peak:
    """One device's peaks: bandwidth in GB/s, GFLOP/s per dtype name (None: not published)."""

    device: str
    bandwidth_gbps: float
    gflops_fp32: float | None
    gflops_16bit: float | None  # bfloat16 and float16
    source: str

    def gflops(self, dtype: str) -> float | None:
        """The compute roof for ``dtype`` (None for dtypes the table has no figure for)."""
        if dtype in ("float32", "float"):
            return self.gflops_fp32
        if dtype in ("bfloat16", "float16", "half"):
            return self.gflops_16bit
        return None


@dataclass(frozen=True)
class Chip:
    """A Trainium chip: its published figures and how many NeuronCores it has."""

    name: str
    cores: int
    bandwidth_gbps: float
    tflops_fp32: float
    tflops_16bit: float
    default_lnc: int
    page: str
    note: str


# instance-type family (before the dot) -> chip; A, the chip pages
TRAINIUM: dict[str, Chip] = {
    "trn1": Chip("Trn1", 2, 820, 47.5, 190, 1, "trainium", "2 NeuronCore-v2, 32 GiB HBM"),
    "trn1n": Chip("Trn1", 2, 820, 47.5, 190, 1, "trainium", "2 NeuronCore-v2, 32 GiB HBM"),
    "inf2": Chip("Inf2", 2, 820, 47.5, 190, 1, "inferentia2", "2 NeuronCore-v2, 32 GiB HBM"),
    "trn2": Chip("Trn2", 8, 2900, 181, 667, 2, "trainium2", "8 NeuronCore-v3, 96 GiB HBM"),
    "trn2u": Chip("Trn2", 8, 2900, 181, 667, 2, "trainium2", "8 NeuronCore-v3, 96 GiB HBM"),
    "trn3": Chip("Trn3", 8, 4900, 183, 671, 2, "trainium3", "8 NeuronCore-v4, 144 GiB HBM"),
}


def neuron_peak(instance_type: str | None, lnc: int | None) -> Peak | None:
    """The peaks of one TorchNeuron device on ``instance_type`` (``trn2.48xlarge``) with the
    logical-core setting ``lnc`` (None: the chip's default), or None for an unknown instance."""
    if not instance_type:
        return None
    chip = TRAINIUM.get(instance_type.split(".", 1)[0].lower())
    if chip is None:
        return None
    lnc = lnc or chip.default_lnc
    share = chip.cores // lnc if chip.cores % lnc == 0 and lnc <= chip.cores else None
    if share is None:
        return None
    per = f"the chip's ÷ {share}" if share > 1 else "the chip's"
    return Peak(
        device=f"{instance_type}: 1 logical NeuronCore (LNC={lnc}) of a {chip.name} chip",
        bandwidth_gbps=chip.bandwidth_gbps / share,
        gflops_fp32=chip.tflops_fp32 * 1000 / share,
        gflops_16bit=chip.tflops_16bit * 1000 / share,
        source=f"{SOURCE_A.format(chip.page)}: {chip.name} chip ({chip.note}) "
        f"{chip.bandwidth_gbps:g} GB/s HBM, {chip.tflops_fp32:g} FP32 / {chip.tflops_16bit:g} "
        f"BF16 dense TFLOPS; per device {per} ({chip.cores} NeuronCores, {lnc} per device at "
        "LNC={lnc}; no per-core HBM share is published)".replace("{lnc}", str(lnc)),
    )


# deviceProperties name (upper case) contains -> peaks; per device as PyTorch sees it
GPUS: tuple[tuple[str, Peak], ...] = (
    ("V100-SXM2", Peak("NVIDIA V100 SXM2", 900, 15_700, 125_000, SOURCE_S)),
    ("A100-SXM4-40GB", Peak("NVIDIA A100 SXM 40 GB", 1555, 19_500, 312_000, SOURCE_S)),
    ("A100-SXM4-80GB", Peak("NVIDIA A100 SXM 80 GB", 2039, 19_500, 312_000, SOURCE_S)),
    ("H100 80GB HBM3", Peak("NVIDIA H100 SXM", 3350, 67_000, 989_000, SOURCE_S)),
    ("H200", Peak("NVIDIA H200", 4800, 67_000, 989_000, SOURCE_S)),
    ("B200", Peak("NVIDIA B200", 8000, 80_000, 2_250_000, SOURCE_S)),
    (
        "MI250X",
        Peak(
            "AMD MI250X, one GCD (half the board)",
            1600,
            23_950,
            191_500,
            f"{SOURCE_R}: board 3.2 TB/s, 47.9 FP32 vector / 383 BF16 TFLOPS, ÷ 2 GCDs",
        ),
    ),
    ("MI300X", Peak("AMD MI300X", 5300, 163_400, 1_307_400, SOURCE_R)),
    ("MI355X", Peak("AMD MI355X", 8000, 157_300, 2_500_000, SOURCE_R)),
)


def gpu_peak(name: str | None) -> Peak | None:
    """The peaks of the GPU Kineto's ``deviceProperties`` names (``NVIDIA H200``), if listed."""
    if not name:
        return None
    upper = name.upper()
    return next((peak for key, peak in GPUS if key.upper() in upper), None)
