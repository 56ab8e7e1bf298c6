"""`--ray auto|ADDRESS`: the workers as Ray actors, one per GPU of a cluster: `RayPool`.

Each actor asks Ray for one GPU (`num_gpus=1`: Ray pins it with CUDA_VISIBLE_DEVICES) or, on the
CPU, for one unit of the custom resource `CPU_WORKER_RESOURCE`, which a CPU node offers as many
times as it should run interpreter workers (`ray start --resources '{"autokernel_cpu": 2}'`),
standing in for GPUs. Jobs and verdicts travel through Ray; only the head (this process) writes
the workspace. A worker directory lives on the actor's node, under its temporary directory.

An actor that dies (its process killed, its node preempted) is restarted by Ray
(`max_restarts=-1`), possibly on another node; the head judges its job in flight again there
(`is_lost`, `restart`). The head dying ends its actors with it (they belong to its job);
`autokernel resume` starts new ones.

Ray is an optional extra (`pip install autokernel[ray]`), imported only here, and only when
--ray is given. Every node runs the same autokernel as the head.
"""

from __future__ import annotations

import importlib.util
import tempfile
import threading
import time
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from autokernel.parallel.slots import ALL, NVLINK_MULTICAST_OFF, parse_gpus
from autokernel.parallel.worker import JudgeJob, JudgeOutcome, JudgeWorker, WorkerIdentity

CPU_WORKER_RESOURCE = "autokernel_cpu"
RESTART_WAIT_S = 900.0  # a preempted node's actor may wait this long for another node
RAY_INSTALL_HINT = "pip install 'autokernel[ray]'"


class RayUnavailable(RuntimeError):
    """Ray is not installed, or no cluster answers at the address."""


def ray_module() -> Any:
    if importlib.util.find_spec("ray") is None:
        raise RayUnavailable(f"--ray needs Ray: {RAY_INSTALL_HINT}")
    import ray

    return ray


class RayJudgeWorker(JudgeWorker):
    """A JudgeWorker that names itself after its node and the GPU Ray gave it."""

    def __init__(self, run_tag: str, slot: int, device: str) -> None:
        import ray

        node = ray.util.get_node_ip_address()
        gpu_ids = ray.get_gpu_ids() if device == "cuda" else []
        label = f"{node}/{gpu_ids[0] if gpu_ids else f'cpu{slot}'}"
        node_dir = Path(tempfile.gettempdir()) / f"autokernel-{run_tag}"
        # The actors of one node share its compile caches, as the workers of one machine do.
        super().__init__(label, node_dir / f"worker{slot}", device, dict(NVLINK_MULTICAST_OFF),
                         harness_cache=node_dir / "harness")

    def forget(self) -> None:
        """Remove this run's directory on the node (worker directories and compile caches),
        when the run's workers close."""
        import shutil

        shutil.rmtree(self.directory.parent, ignore_errors=True)


def connect(address: str) -> Any:
    """Join the cluster at `address` ("auto": the one running on this machine or named by
    RAY_ADDRESS). RayUnavailable with one line when there is none."""
    ray = ray_module()
    if ray.is_initialized():
        return ray
    try:
        ray.init(address=address, log_to_driver=False, include_dashboard=False,
                 configure_logging=False)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise RayUnavailable(f"--ray {address}: no Ray cluster answers ({exc}); start one with "
                             "`ray start --head` or give its address") from exc
    return ray


def cluster_slots(spec: str, device: str) -> int:
    """How many workers `--gpus spec` means on the cluster: `all` is every GPU it has (every
    unit of CPU_WORKER_RESOURCE on the CPU); a count is taken as given; a list of indices means
    nothing across nodes and is refused."""
    import ray

    wanted = parse_gpus(spec)
    resource = "GPU" if device == "cuda" else CPU_WORKER_RESOURCE
    have = int(ray.cluster_resources().get(resource, 0))
    if isinstance(wanted, list):
        raise RayUnavailable("--gpus with --ray takes all or a count; GPU indices name GPUs of "
                             "one machine")
    if have < 1:
        raise RayUnavailable(f"the Ray cluster offers no {resource} resource"
                             + ("" if device == "cuda" else
                                f" (start CPU nodes with --resources "
                                f"'{{\"{CPU_WORKER_RESOURCE}\": N}}')"))
    if wanted == ALL:
        return have
    assert isinstance(wanted, int)
    if wanted > have:
        raise RayUnavailable(f"--gpus {wanted}: the Ray cluster offers {have} {resource}")
    return wanted


class RayPool:
    """An actor per slot; `submit(i, job)` runs the job on slot i's actor."""

    kind = "ray"

    def __init__(self, count: int, device: str, run_tag: str) -> None:
        import ray

        self.ray = ray
        self.device = device
        resources: dict[str, Any] = (
            {"num_gpus": 1} if device == "cuda"
            else {"num_cpus": 0, "resources": {CPU_WORKER_RESOURCE: 1}})
        actor_class = ray.remote(RayJudgeWorker).options(
            max_restarts=-1, max_task_retries=0,
            runtime_env={"env_vars": dict(NVLINK_MULTICAST_OFF)}, **resources)
        self._actors = [actor_class.remote(run_tag, slot, device) for slot in range(count)]
        self.slots = list(range(count))

    def start(self) -> list[WorkerIdentity]:
        return self.ray.get([actor.hello.remote() for actor in self._actors])

    def submit(self, index: int, job: JudgeJob) -> Future[JudgeOutcome]:
        return self._actors[index].judge.remote(job).future()

    def is_lost(self, error: BaseException) -> bool:
        """Whether a job failed because its actor or node died (not because of the job)."""
        exceptions = self.ray.exceptions
        lost = tuple(getattr(exceptions, name) for name in (
            "RayActorError", "WorkerCrashedError", "NodeDiedError", "ObjectLostError",
            "OwnerDiedError", "ActorUnavailableError") if hasattr(exceptions, name))
        return isinstance(error, lost)

    def restart(self, index: int) -> Future[WorkerIdentity]:
        """Slot i's actor once Ray has restarted it, maybe on another node. While it restarts
        its calls fail at once ("temporarily unavailable"): asked again every second, for up to
        `RESTART_WAIT_S`, before the restart counts as failed."""
        identity: Future[WorkerIdentity] = Future()
        deadline = time.monotonic() + RESTART_WAIT_S

        def ask() -> None:
            self._actors[index].hello.remote().future().add_done_callback(answered)

        def answered(reply: Future[WorkerIdentity]) -> None:
            error = reply.exception()
            if error is None:
                identity.set_result(reply.result())
            elif self.is_lost(error) and time.monotonic() < deadline:
                threading.Timer(1.0, ask).start()
            else:
                identity.set_exception(error)

        ask()
        return identity

    def close(self, *, abandon: bool = False) -> None:
        if not abandon:  # leave no directory behind on the nodes
            try:
                self.ray.get([actor.forget.remote() for actor in self._actors], timeout=60)
            except Exception:  # an actor gone with its node: its directory went with it
                pass
        for actor in self._actors:
            try:
                self.ray.kill(actor, no_restart=True)
            except Exception:  # already gone with its node: nothing left to stop
                pass
        self._actors = []
