"""cluster/: the Ray launcher config passes Ray's own validation; the KubeRay RayCluster, RayJob and CronJob
are well formed and consistent with each other, the Dockerfile and the command line."""

from __future__ import annotations

import shlex
import tomllib
from pathlib import Path

import pytest
import yaml

from specbench.cli.parser import build_parser
from specbench.experiments.registry import load_config

pytestmark = pytest.mark.unit
ROOT = Path(__file__).resolve().parents[2]
CLUSTER = ROOT / "cluster"


def _load(name: str) -> dict:
    return yaml.safe_load((CLUSTER / name).read_text(encoding="utf-8"))


def test_launcher_config_validates_with_ray() -> None:
    from ray.autoscaler._private.util import prepare_config, validate_config

    config = _load("ray-cluster.yaml")
    validate_config(prepare_config(config))  # what `ray up` does: defaults filled in, then the schema
    types = config["available_node_types"]
    assert types[config["head_node_type"]]["resources"]["GPU"] == 0
    gpu = [t for t in types.values() if t["resources"].get("GPU", 0) >= 1]
    assert gpu and gpu[0]["max_workers"] >= 1 and config["idle_timeout_minutes"] > 0
    assert any("pip install" in c and ".[gpu]" in c for c in config["setup_commands"])
    assert any("cluster/install-speech-packages.sh" in c for c in config["setup_commands"])
    broken = prepare_config(dict(config))
    broken["max_workers"] = "many"
    with pytest.raises(Exception, match="many"):
        validate_config(broken)


def test_kuberay_manifests_agree_with_the_image_and_the_cli() -> None:
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    image = f"specbench:{version}"
    cluster, job, cron = (_load(n) for n in ("kuberay-raycluster.yaml", "kuberay-rayjob-nightly.yaml",
                                              "kuberay-cronjob-nightly.yaml"))
    assert (cluster["apiVersion"], cluster["kind"]) == ("ray.io/v1", "RayCluster")
    assert (job["apiVersion"], job["kind"]) == ("ray.io/v1", "RayJob")
    assert (cron["apiVersion"], cron["kind"]) == ("batch/v1", "CronJob")
    head = cluster["spec"]["headGroupSpec"]
    assert head["rayStartParams"]["num-gpus"] == "0"
    images = {c["image"] for c in head["template"]["spec"]["containers"]}
    for group in cluster["spec"]["workerGroupSpecs"]:
        (container,) = group["template"]["spec"]["containers"]
        images.add(container["image"])
        assert container["resources"]["limits"]["nvidia.com/gpu"] == int(group["rayStartParams"]["num-gpus"]) == 1
    images |= {c["image"] for c in job["spec"]["submitterPodTemplate"]["spec"]["containers"]}
    assert images == {image}
    assert job["spec"]["clusterSelector"]["ray.io/cluster"] == cluster["metadata"]["name"]
    argv = shlex.split(job["spec"]["entrypoint"])
    assert argv[:3] == ["python", "-m", "specbench"]
    args = build_parser().parse_args(argv[3:])
    assert args.command == "nightly" and args.tracking_uri.startswith("http://")
    assert load_config(ROOT / args.file).KIND == "nightly"
    runtime = yaml.safe_load(job["spec"]["runtimeEnvYAML"])
    dockerfile = (CLUSTER / "Dockerfile").read_text()
    assert f"WORKDIR {runtime['working_dir']}" in dockerfile and runtime["env_vars"]["PYTHONPATH"] == "platform"
    assert f"-t {image}" in dockerfile
    # every registered voice is installed, by the script CI uses too
    assert "bash /tmp/install-speech-packages.sh" in dockerfile
    pods = [head["template"]["spec"]] + [g["template"]["spec"] for g in cluster["spec"]["workerGroupSpecs"]]
    shared = set()
    for pod in pods:  # one read-write work directory, the same volume on every node
        claims = {v["name"]: v["persistentVolumeClaim"]["claimName"] for v in pod["volumes"]}
        for container in pod["containers"]:
            home = {e["name"]: e["value"] for e in container["env"]}["SPECBENCH_HOME"]
            (mount,) = [m for m in container["volumeMounts"] if m["mountPath"] == home]
            assert not mount.get("readOnly", False)
            shared.add((home, claims[mount["name"]]))
    assert len(shared) == 1 and runtime["env_vars"]["SPECBENCH_HOME"] == next(iter(shared))[0]
    minute, hour, *_ = cron["spec"]["schedule"].split()
    assert len(cron["spec"]["schedule"].split()) == 5 and minute.isdigit() and hour.isdigit()
    (submit,) = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"]
    assert submit["command"][:3] == ["kubectl", "create", "-f"]
    assert (CLUSTER / Path(submit["command"][3]).name).is_file()


def test_local_cluster_script_binds_loopback_and_puts_the_environment_on_path() -> None:
    text = (CLUSTER / "local_cluster.sh").read_text()
    assert "--dashboard-host 127.0.0.1" in text and "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0" in text
    assert '.venv/bin:$PATH' in text
    # token auth on, with a token made where the machine has none (`ray start` makes none)
    assert 'RAY_AUTH_MODE="${RAY_AUTH_MODE:-token}"' in text and "ray get-auth-token --generate" in text


def test_launcher_keeps_the_dashboard_and_mlflow_on_the_heads_loopback() -> None:
    config = _load("ray-cluster.yaml")
    head = " ".join(config["head_start_ray_commands"])
    assert "0.0.0.0" not in head
    assert "--dashboard-host=127.0.0.1" in head and "specbench server --host 127.0.0.1" in head


def test_the_image_leaves_the_environment_the_work_directory_and_git_out() -> None:
    """`COPY . /opt/specbench` in cluster/Dockerfile copies the build context: .dockerignore keeps the
    gigabytes of .venv and .specbench, and .git, out of it (but not what the image installs and runs)."""
    assert "COPY . /opt/specbench" in (CLUSTER / "Dockerfile").read_text()
    ignored = {line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines()
               if line.strip() and not line.startswith("#")}
    assert {".venv", ".specbench", ".git", "**/__pycache__", "**/*.egg-info"} <= ignored
    assert not ignored & {"platform", "pyproject.toml", "jobs", "models", "cluster", "README.md"}
