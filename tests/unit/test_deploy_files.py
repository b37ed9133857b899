"""The deployment files parse, and every setting they set is a real one."""

from pathlib import Path

import yaml

from streamdedup.settings import Settings

REPO = Path(__file__).resolve().parents[2]
KNOWN = {f"STREAMDEDUP_{name.upper()}" for name in Settings.model_fields}


def _documents(path):
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def test_kubernetes_manifests():
    kinds = {}
    for path in sorted((REPO / "deploy" / "k8s").glob("*.yaml")):
        for doc in _documents(path):
            kinds.setdefault(doc["kind"], []).append(doc)
    assert set(kinds) == {"ConfigMap", "StatefulSet", "Service"}
    (config,) = kinds["ConfigMap"]
    assert set(config["data"]) <= KNOWN
    Settings(
        **{k.removeprefix("STREAMDEDUP_").lower(): v for k, v in config["data"].items()}
    )  # values validate
    (stateful,) = kinds["StatefulSet"]
    container = stateful["spec"]["template"]["spec"]["containers"][0]
    assert container["volumeMounts"][0]["mountPath"] == config["data"]["STREAMDEDUP_DATA_DIR"]
    assert (
        stateful["spec"]["volumeClaimTemplates"][0]["metadata"]["name"]
        == container["volumeMounts"][0]["name"]
    )
    assert container["readinessProbe"]["httpGet"]["path"] == "/health"
    assert any(
        s["metadata"]["annotations"].get("prometheus.io/path") == "/metrics"
        for s in kinds["Service"]
        if "annotations" in s["metadata"]
    )


def test_compose_file():
    compose = yaml.safe_load((REPO / "docker-compose.yml").read_text())
    assert compose["services"]["kafka"]["image"].startswith("apache/kafka:4.")
    for service in ("worker", "tools"):
        assert set(compose["services"][service]["environment"]) <= KNOWN


def test_broker_script_pins_one_kafka_4_version():
    pom = (REPO / "deploy" / "kafka" / "pom.xml").read_text()
    assert "<kafka.version>4." in pom and "kafka_2.13" in pom
