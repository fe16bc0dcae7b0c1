"""Which programs the audit counts, and what was found about each one that does not run as written.

Skyward (github.com/gabfssilva/skyward, mirrored commit f43ac11): every `guides/*.py` and `sample.py`, found in
the mirror (so a newer mirror brings its new guides). SkyPilot (github.com/skypilot-org/skypilot): the task
files and smoke-test command sequences listed in SKYPILOT below, by path in that repository.

`verdict`/`why` record the classification of a failure (made by reading the run's output); the runner never
decides "gap" or "machine" by itself — an unrecorded failure shows as "unclassified". `edits` are the
program-specific changes for the "after edits" run: (old text, new text, why).
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass, field
from pathlib import Path

GAP = "skyhive gap"
MACHINE = "program/machine"


@dataclass
class Program:
    id: str
    origin: str                      # "skyward" | "skypilot"
    kind: str                        # "py": run files[0] with python; "cmds": run commands with bash
    files: list[str] = field(default_factory=list)
    commands: list[str] = field(default_factory=list)
    edits: list[tuple[str, str, str]] = field(default_factory=list)
    verdict: str = ""
    why: str = ""


# What was found running each Skyward program that does not exit 0 as written (keyed by path).
SKYWARD_FOUND: dict[str, dict] = {
    "guides/04_gpu_accelerators.py": dict(verdict=MACHINE, why=(
        "no GPU: the program reads result['gpu'], which its function returns only when torch.cuda.is_available() "
        "(the L40S it asks for; skyhive runs it on Local with an AcceleratorWarning)")),
    "guides/07_keras_training.py": dict(verdict=MACHINE, why=(
        "its top-level `import keras` needs Keras' default TensorFlow backend, not installed here (the plugin's "
        "backend='jax' applies on the nodes); its function downloads MNIST (keras.datasets.mnist.load_data): "
        "no internet")),
    "guides/08_huggingface_finetuning.py": dict(verdict=MACHINE, why=(
        "no internet: the Image pip-installs CUDA torch (GBs of nvidia-* wheels; past the 120 s limit here), then "
        "from_pretrained and load_dataset('imdb') download a model and a dataset")),
    "guides/09_scikit_grid_search.py": dict(
        verdict=MACHINE,
        why="CPU time: 21 candidates × cv=5 = 105 fits (RandomForest up to 200 trees, GradientBoosting) exceed 120 s on this machine's 2 shared cores",
        edits=[("cv=5,", "cv=2,", "cv=5 → cv=2"),
               ('"clf__n_estimators": [50, 100],', '"clf__n_estimators": [10],',
                "GradientBoosting n_estimators [50, 100] → [10]"),
               ('"clf__n_estimators": [50, 100, 200],', '"clf__n_estimators": [10],',
                "RandomForest n_estimators [50, 100, 200] → [10]")]),
    "guides/15_torch_model_roundtrip.py": dict(verdict=MACHINE, why=(
        "no internet: torchvision's datasets.MNIST(download=True) (torchvision is not installed here either)")),
    "guides/16_cuml_acceleration.py": dict(verdict=MACHINE, why=(
        "needs an NVIDIA GPU with RAPIDS cuML (sky.plugins.cuml: not provided, not asked in issue 40: a GPU)")),
    "guides/17_s3_volumes.py": dict(verdict=GAP, why=(
        "sky.storage / sky.Volume are not provided (`AttributeError: module 'skyhive' has no attribute 'storage'`; "
        "not asked in issue 40: the volumes of the habits issue); it would then need Hyperstack's S3 "
        "(internet) and an L4")),
    "guides/18_nvidia_mig.py": dict(verdict=MACHINE, why=(
        "needs a MIG-capable NVIDIA GPU (sky.plugins.mig: not provided, not asked in issue 40: a GPU)")),
    "guides/19_fsdp_huggingface.py": dict(verdict=MACHINE, why=(
        "reads os.environ['HF_TOKEN'] (a HuggingFace token) and downloads a model and wikitext: no internet")),
    "guides/20_fractional_gpus.py": dict(verdict=MACHINE, why=(
        "no GPU: the program needs CUDA (torch.device('cuda')) and a model download; its "
        "`sky.Compute(..., options=sky.Options(provision_timeout=600))` line runs (sky.Options, issue 40)")),
}


def _sp(test: str, files: list[str], commands: list[str], **found) -> Program:
    return Program(id=f"skypilot:{test}", origin="skypilot", kind="cmds", files=files,
                   commands=[c.replace("{name}", "audit") for c in commands], **found)


# SkyPilot's programs: a smoke test's command sequence (its steps, verbatim but for the cluster name, which is
# `audit`; the teardown `sky down -y NAME` is left to the runner) and the task files it names, read from
# github.com/skypilot-org/skypilot (tests/smoke_tests/test_basic.py's older form, where the steps are plain
# strings, and tests/test_yamls/ + examples/ of today's master). Each id says where the steps come from.
_TS = "1765000000"  # the smoke tests' `timestamp` value
# The steps of the smoke/ programs come from an older tests/test_smoke.py of SkyPilot (each step a plain
# string; today's tests/smoke_tests/test_basic.py builds the same steps with helpers), test_cli_logs from its
# Lambda variant with `{LAMBDA_TYPE}` (an instance-type flag of that cloud) left out by the cloud → Local rule.
# The task files as read for this audit (path: the commit of skypilot-org/skypilot that stored them):
SKYPILOT_FILES = {
    "examples/env_check.yaml": "09859547c60c579af693101fb5b4114fc5cb2ee8",
    "examples/job_queue/cluster.yaml": "1468060dd2afad96682718f27c303a8e071f70f0",
    "examples/job_queue/cluster_multinode.yaml": "0113e58608e86478e847d1512bfac386122f797e",
    "examples/job_queue/job.yaml": "1468060dd2afad96682718f27c303a8e071f70f0",
    "examples/job_queue/job_multinode.yaml": "003eac8eb9c0b3f49cde93e826be314e05b04c42",
    "examples/minimal.yaml": "16d33ceb49687ee1e6d2f9163f3b72416ee78850",
    "examples/multi_hostname.yaml": "9ec0b8839ecaf3682854022fc1aa586d5fdf538d",
    "tests/test_yamls/autostop.yaml": "707bccf1894e78b911a0a9cd21e33f7bba18f68a",
    "tests/test_yamls/long_log_line.yaml": "62299c52994ea44b244dfb3cb40a8d6086af9c34",
    "tests/test_yamls/minimal.yaml": "2d7227054e0424bc371dfc4a175ce30a118e784e",
    "tests/test_yamls/multi_node_sleep.yaml": "68e81017e627d902a54284ee01a60efad1f07365",
    "tests/test_yamls/streaming_logs.yaml": "d4bb793599d5f85d2a71db2cc45de0af6ebeaafa",
    "tests/test_yamls/test_list_null_accelerators.yaml": "ca4e6a57fb7bb41179d652c527a0221cd8430f69",
}
SKYPILOT: list[Program] = [
    _sp("smoke/test_minimal", ["examples/minimal.yaml"], [
        "sky launch -y -c {name} examples/minimal.yaml",
        "sky launch -y -c {name} examples/minimal.yaml",
        "sky logs {name} 1 --status"]),
    _sp("smoke/test_region", ["examples/minimal.yaml"], [
        "sky launch -y -c {name} --region us-west-2 examples/minimal.yaml",
        "sky exec {name} examples/minimal.yaml",
        "sky logs {name} 1 --status"],
        verdict=MACHINE, why="pins an AWS region (--region us-west-2): Local has no regions and skyhive refuses the "
        "option by name (`the local provider has no such option`), as designed; needs the cloud"),
    _sp("smoke/test_env_check", ["examples/env_check.yaml"], [
        "sky launch -y -c {name} examples/env_check.yaml",
        "sky logs {name} 1 --status"],
        verdict=MACHINE, why="expects to be launched from SkyPilot's own checkout: `workdir: .` must hold SkyPilot's "
        "`sky/` package (`~/sky_workdir/sky does not exist`); every other check (TEST_VAR from ~/.bashrc, "
        "SKYPILOT_NODE_RANK, two SKYPILOT_NODE_IPS, SKYPILOT_TASK_ID) passes",
        edits=[("[[ -d ~/sky_workdir/sky ]]", "[[ -d ~/sky_workdir ]]",
                "check that ~/sky_workdir exists rather than SkyPilot's sky/ package inside it")]),
    _sp("smoke/test_job_queue", ["examples/job_queue/cluster.yaml", "examples/job_queue/job.yaml"], [
        "sky launch -y -c {name} examples/job_queue/cluster.yaml",
        "sky exec {name} -d examples/job_queue/job.yaml",
        "sky exec {name} -d examples/job_queue/job.yaml",
        "sky exec {name} -d examples/job_queue/job.yaml",
        "sky logs {name} 2",
        "sky queue {name}"],
        edits=[("for i in {1..120}; do", "for i in {1..10}; do", "job.yaml's loop of 120 one-second sleeps → 10 "
                "(three 120 s jobs do not fit the audit's 120 s limit)")]),
    _sp("smoke/test_multi_node_job_queue",
        ["examples/job_queue/cluster_multinode.yaml", "examples/job_queue/job_multinode.yaml"], [
        "sky launch -y -c {name} examples/job_queue/cluster_multinode.yaml",
        "sky exec {name} -d examples/job_queue/job_multinode.yaml",
        "sky exec {name} -d examples/job_queue/job_multinode.yaml",
        "sky exec {name} -d examples/job_queue/job_multinode.yaml",
        "sky cancel {name} 1",
        "sky logs {name} 2",
        "sky queue {name}"],
        edits=[("for i in {1..120}; do", "for i in {1..10}; do", "job_multinode.yaml's loop of 120 one-second "
                "sleeps → 10 (three 120 s jobs do not fit the audit's 120 s limit)")]),
    _sp("smoke/test_multi_hostname", ["examples/multi_hostname.yaml"], [
        "sky launch -y -c {name} examples/multi_hostname.yaml",
        "sky logs {name} 1 --status",
        "sky exec {name} examples/multi_hostname.yaml",
        "sky logs {name} 2 --status"]),
    _sp("smoke/test_cli_logs", [], [
        f'sky launch -y -c {{name}} "echo {_TS} 1"',
        f'sky exec {{name}} "echo {_TS} 2"',
        f'sky exec {{name}} "echo {_TS} 3"',
        f'sky exec {{name}} "echo {_TS} 4"',
        "sky logs {name} 2 --status",
        "sky logs {name} 3 4 --sync-down",
        "sky logs {name} * --sync-down",
        f'sky logs {{name}} 1 | grep "{_TS} 1"',
        f'sky logs {{name}} | grep "{_TS} 4"']),
    # today's tests/test_yamls: the steps are the audit's own, not a smoke test's — SkyPilot's launch form
    # (`sky launch -y -c NAME --infra CLOUD FILE`) and a check that the job did what the file says
    _sp("test_yamls/minimal.yaml", ["tests/test_yamls/minimal.yaml"], [
        "sky launch -y -c {name} --infra aws tests/test_yamls/minimal.yaml",
        "sky logs {name} 1 --status",
        'sky logs {name} --status | grep "Job 1: SUCCEEDED"']),
    _sp("test_yamls/multi_node_sleep.yaml", ["tests/test_yamls/multi_node_sleep.yaml"], [
        "sky launch -y -c {name} --infra aws --num-nodes 2 tests/test_yamls/multi_node_sleep.yaml",
        "sky logs {name} 1 --status"]),
    _sp("test_yamls/streaming_logs.yaml", ["tests/test_yamls/streaming_logs.yaml"], [
        "sky launch -y -c {name} --infra aws tests/test_yamls/streaming_logs.yaml",
        "sky logs {name} 1 | grep STREAM_DONE"]),
    _sp("test_yamls/long_log_line.yaml", ["tests/test_yamls/long_log_line.yaml"], [
        "sky launch -y -c {name} --infra aws tests/test_yamls/long_log_line.yaml",
        "sky logs {name} 1 | grep LONG_LOG_LINE_END"]),
    _sp("test_yamls/test_list_null_accelerators.yaml", ["tests/test_yamls/test_list_null_accelerators.yaml"], [
        "sky launch -y -c {name} --infra aws tests/test_yamls/test_list_null_accelerators.yaml"]),
    _sp("test_yamls/autostop.yaml", ["tests/test_yamls/autostop.yaml"], [
        "sky launch -y -c {name} --infra aws tests/test_yamls/autostop.yaml",
        "sky status {name}"]),
]


def skyward_programs(gitdir: Path) -> list[Program]:
    names = subprocess.run(["git", f"--git-dir={gitdir}", "ls-tree", "--name-only", "HEAD", "guides/"],
                           check=True, capture_output=True, text=True).stdout.split()
    paths = sorted(p for p in names if p.endswith(".py")) + ["sample.py"]
    return [Program(id=f"skyward:{p}", origin="skyward", kind="py", files=[p], **SKYWARD_FOUND.get(p, {}))
            for p in paths]


def programs(gitdir: Path) -> list[Program]:
    return skyward_programs(gitdir) + list(SKYPILOT)
