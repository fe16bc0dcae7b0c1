"""Which AMI a pool boots by default, and which user logs in to it: data, chosen by the GPU's generation.

NVIDIA's open kernel modules (the "OSS" driver of AWS's Deep Learning Base AMI) drive only Turing and
later GPUs; Volta, Pascal, Maxwell and Kepler need the proprietary driver (NVIDIA's open-gpu-kernel-modules
README: "supported on Turing and later"). So a V100 (p3) or M60 (g3) gets the proprietary-driver Deep
Learning Base AMI — on Amazon Linux 2, the only current line that lists P3 and G3, logging in as
``ec2-user`` — a T4/A10G/L4/L40S/A100/H100/H200/B200 the OSS one on Ubuntu 22.04, a CPU type plain
Ubuntu 22.04.
K80 (p2) is supported by neither current DLAMI: it has no default and must be given `image=`.

An explicit `image=` always wins; the login user then follows the image's name (Ubuntu "ubuntu", Amazon
Linux "ec2-user", Debian "admin", ...), unless `ssh_user=` says otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ImageSpec", "GPU_GENERATION", "PRE_TURING", "IMAGES", "default_image", "user_for_image"]


@dataclass(frozen=True, slots=True)
class ImageSpec:
    """A default image: found as the newest AMI of `owner` whose name matches `name`; logs in as `user`."""

    key: str
    owner: str
    name: str
    user: str


#: GPU model (as the machine table spells it) -> NVIDIA architecture
GPU_GENERATION: dict[str, str] = {
    "K80": "kepler", "M60": "maxwell", "P100": "pascal", "V100": "volta", "V100-32GB": "volta",
    "T4": "turing", "T4g": "turing", "A10G": "ampere", "A100": "ampere", "A100-80GB": "ampere",
    "L4": "ada", "L40S": "ada", "H100": "hopper", "H200": "hopper", "B200": "blackwell", "B300": "blackwell",
}

#: generations the open kernel modules cannot drive
PRE_TURING = frozenset({"kepler", "maxwell", "pascal", "volta"})
#: generations no current Deep Learning Base AMI supports at all
UNSUPPORTED = frozenset({"kepler"})

IMAGES: dict[str, ImageSpec] = {
    "cpu": ImageSpec("cpu", "099720109477", "ubuntu/images/hvm-ssd/ubuntu-jammy-22.04-amd64-server-*", "ubuntu"),
    # the one current DLAMI line whose release notes list P3/P3dn (V100) and G3 (M60): "Deep Learning Base
    # Proprietary Nvidia Driver AMI (Amazon Linux 2) Version 71.6", 2026-01-02, supported_ec2_instances "G3
    # (G3.16x not supported), P3, P3dn, Inf1", driver 570.195.03
    # (https://docs.aws.amazon.com/dlami/latest/devguide/aws-deep-learning-ami-base-aml2-2026-01-02.html); the
    # Ubuntu 20.04 proprietary line this named before ended with Ubuntu 20.04's standard support (2025-05)
    "gpu-proprietary": ImageSpec("gpu-proprietary", "amazon",
                                 "Deep Learning Base Proprietary Nvidia Driver AMI (Amazon Linux 2) Version *",
                                 "ec2-user"),
    "gpu-oss": ImageSpec("gpu-oss", "amazon", "Deep Learning Base OSS Nvidia Driver GPU AMI (Ubuntu 22.04)*", "ubuntu"),
}

#: an image name's start (lower case) -> its login user
#: (the operating system first: a Deep Learning AMI's name says which it runs, "... (Amazon Linux 2) ...";
#: one that names none is Ubuntu)
USERS_BY_NAME: tuple[tuple[str, str], ...] = (
    ("ubuntu", "ubuntu"), ("amzn", "ec2-user"), ("al2023", "ec2-user"), ("amazon linux", "ec2-user"),
    ("debian", "admin"), ("rocky", "rocky"), ("rhel", "ec2-user"), ("fedora", "fedora"), ("centos", "centos"),
    ("deep learning", "ubuntu"),
)


def default_image(accelerator: str | None) -> ImageSpec:
    """The default image for a machine with this GPU model (None: no GPU). Raises ValueError for a GPU
    that no default image drives (K80), naming it and `image=`."""
    if not accelerator:
        return IMAGES["cpu"]
    generation = GPU_GENERATION.get(accelerator)
    if generation in UNSUPPORTED:
        raise ValueError(f"no default image drives {accelerator} ({generation}): current NVIDIA drivers dropped it; "
                         f"pass image= with an AMI that has a driver for it")
    if generation in PRE_TURING:
        return IMAGES["gpu-proprietary"]
    return IMAGES["gpu-oss"]  # Turing and later, and GPUs newer than this table


def user_for_image(name: str, default: str = "ubuntu") -> str:
    """The login user of an image, from its name (or description); `default` when it says nothing."""
    lowered = name.lower()
    for start, user in USERS_BY_NAME:
        if start in lowered:
            return user
    return default
