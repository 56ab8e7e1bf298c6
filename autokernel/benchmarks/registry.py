"""Every benchmark of the suite: its name, what it measures, the module (or shell script) that
runs it, and the records under docs/benchmarks it made. `python -m autokernel.benchmarks --list`
prints this table; docs/benchmarks/README.md says, per record, which benchmark made it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

SHELL_DIR = Path(__file__).resolve().parent / "shell"


@dataclass(frozen=True)
class Benchmark:
    name: str
    summary: str
    module: str = ""  # autokernel.benchmarks.<module>, whose main(argv) runs it
    script: str = ""  # or a bash script in benchmarks/shell/, run with the arguments
    records: tuple[str, ...] = ()  # what it made under docs/benchmarks/ (globs)
    gpu: bool = True  # needs a CUDA GPU for figures that mean something

    def command(self) -> str:
        return f"python -m autokernel.benchmarks {self.name}"


BENCHMARKS: tuple[Benchmark, ...] = (
    Benchmark("timing-check", "the harness's timing: agreement with do_bench (`agreement`) and "
              "the A/A and A/B keep rates (`keep-rates`)", module="timing_check",
              records=("timing-agreement-h100*.md", "timing-agreement-h100*.json",
                       "keep-rates-h100-*.md", "keep-rates-h100-*.json")),
    Benchmark("harness-table", "every starter through the full harness: verdicts, timings, "
              "harness wall time (`--backend cuda`: CUDA C++ against Triton)",
              module="harness_table",
              records=("starters-h200.*", "harness-starters-h100-*")),
    Benchmark("judge-seconds", "median seconds per experiment of the harness as the loop runs "
              "it (issue 26 budget: 10 s)", module="judge_seconds",
              records=("judge-h200-*.md",)),
    Benchmark("host-cost", "host launch cost of the Triton starters against eager PyTorch",
              module="host_cost", records=("timing-h100.md",)),
    Benchmark("route-host-cost", "host cost of a routed call per kernel type, over the bare "
              "launch", module="route_host_cost",
              records=("in-context-h200/route-host-cost-*.md",)),
    Benchmark("in-context", "a short run, verify's in-context selection and deliveries, the "
              "report and the exported module's optimize(model)", script="in_context.sh",
              records=("in-context-h200/",)),
    Benchmark("in-context-models", "`in-context` on several models in one call, and one table of "
              "each delivery against eager and the faster compile mode (issue 25's checks)",
              module="in_context_models"),
    Benchmark("tuner-run", "a 20-minute tuner run on a LLaMA-style model, in resumable chunks",
              script="tuner_run.sh",
              records=("tuner-run-*/", "timing-h100.md")),
    Benchmark("tuner-run-summary", "a tuner run's workspace as Markdown (tuner-run calls it)",
              module="tuner_run_summary", gpu=False),
    Benchmark("e2e-verify", "verify and report of a tuner run, collected under docs/benchmarks",
              script="e2e_verify.sh", records=("e2e-llama7b/", "e2e-llama7b-winners/")),
    Benchmark("kernelbench", "`autokernel kernelbench` on a few shipped problems, sized for one "
              "device call", script="kernelbench.sh",
              records=("kernelbench-h100-*", "kernelbench-check-h100-*",
                       "kernelbench-h200-*/")),
    Benchmark("config-sweep", "every starter configuration a tuner could pick, timed by "
              "do_bench", module="config_sweep", records=("config-sweep-h100/",)),
    Benchmark("tuner-seeding", "seeded vs unseeded tuner sweeps on the config-sweep table "
              "(offline)", module="tuner_seeding", records=("tuner-seeding-*",), gpu=False),
    Benchmark("adversarial-table", "the adversarial and honest kernels' verdicts from a pytest "
              "junit XML", module="adversarial_table", records=("adversarial-h100-*.md",),
              gpu=False),
    Benchmark("profiles", "`autokernel profile` of every example model, with the acceptance "
              "checks", module="profile_examples", records=("../profiles/",)),
    Benchmark("calibrate-check", "`autokernel doctor --calibrate`: the GPU recognised, ceilings "
              "plausible", module="calibrate_check", records=("README.md",)),
    Benchmark("flash-attention-check", "the flash_attention starter against SDPA, head dims "
              "64-1024", module="flash_attention_check",
              records=("flash-attention-h200-*.md",)),
    Benchmark("matmul-roles", "the matmul starter at each matmul role's shapes against "
              "torch.matmul", module="matmul_roles", records=("matmul-roles-h200/",)),
    Benchmark("claude-night-cost", "what a --agent claude night can cost with the default caps "
              "(the README's figure)", module="claude_night_cost", gpu=False),
    Benchmark("parallel-aa", "one GPU: --gpus 1 (the multi-GPU loop, one worker) against "
              "today's loop, and today's twice: shared keep decisions, experiments an hour",
              module="parallel_aa", records=("parallel-aa-h200/",)),
    Benchmark("parallel-scaling", "experiments an hour of `run --gpus N` and problems an hour of "
              "`kernelbench --gpus N`, N = 1, 2, 4 by default, in one call",
              module="parallel_scaling"),
    Benchmark("record-result", "record a verified run as the README's measured result "
              "(docs/benchmarks/NAME/)", module="record_result", gpu=False,
              records=("mistral-h200-*/", "vit-h200-*/")),
)


def find(name: str) -> Benchmark | None:
    return next((b for b in BENCHMARKS if b.name == name), None)
