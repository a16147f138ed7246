"""The read API's deployment files: its Kubernetes Deployment, Service and HorizontalPodAutoscaler
beside the worker's (validated against the Kubernetes schemas with the rest of the base by
tests/unit/test_deploy_files.py), and the image's command."""

from __future__ import annotations

from worker.settings import Settings

from .test_deploy_files import _base_objects, _container, _dockerfile_instructions, _env_names, _find, _port_number

API_PORT = Settings.model_fields["api_port"].default


def test_the_api_deployment_runs_ratings_api_on_the_contract_port():
    """`ratings api` listening on every address, port 8080 (RATINGS_API_PORT's default and the
    ConfigMap's), readiness /health, liveness a TCP check (a database outage does not restart it),
    scrape annotations on /metrics; the HPA owns the replica count."""
    container = _container("ratings-api")
    assert container["args"] == ["api", "--host", "0.0.0.0"]
    assert _port_number(container, "http") == API_PORT == 8080
    assert _find("ConfigMap", "ratings-config")["data"]["RATINGS_API_PORT"] == str(API_PORT)
    assert container["readinessProbe"]["httpGet"]["path"] == "/health"
    assert _port_number(container, container["readinessProbe"]["httpGet"]["port"]) == API_PORT
    assert "tcpSocket" in container["livenessProbe"] and "httpGet" not in container["livenessProbe"]
    annotations = _find("Deployment", "ratings-api")["spec"]["template"]["metadata"]["annotations"]
    assert annotations == {"prometheus.io/scrape": "true", "prometheus.io/port": str(API_PORT),
                           "prometheus.io/path": "/metrics"}
    assert "replicas" not in _find("Deployment", "ratings-api")["spec"], "the HPA owns the API's count"


def test_the_api_reads_its_own_database_url_and_optional_tokens():
    """RATINGS_API_DATABASE_URL from the Secret's api-database-url; RATINGS_API_TOKENS optional; no
    worker or broker URL (the API neither writes nor publishes)."""
    env = _env_names(_container("ratings-api"))
    assert env["RATINGS_API_DATABASE_URL"]["valueFrom"]["secretKeyRef"] == {"name": "ratings-urls",
                                                                             "key": "api-database-url"}
    assert env["RATINGS_API_TOKENS"]["valueFrom"]["secretKeyRef"]["optional"] is True
    assert "RATINGS_DATABASE_URL" not in env and "RATINGS_BROKER_URL" not in env


def test_the_service_and_the_autoscaler_point_at_the_api_pods():
    """The Service selects the API pods (not the worker's or relay's) and targets its port; the HPA
    scales the API Deployment from at least 2 pods."""
    pods = _find("Deployment", "ratings-api")["spec"]["template"]["metadata"]["labels"]
    service = _find("Service", "ratings-api")
    assert service["spec"]["selector"].items() <= pods.items()
    for other in ("ratings-worker", "ratings-relay"):
        labels = _find("Deployment", other)["spec"]["template"]["metadata"]["labels"]
        assert not service["spec"]["selector"].items() <= labels.items()
    (port,) = service["spec"]["ports"]
    assert _port_number(_container("ratings-api"), port["targetPort"]) == API_PORT
    hpa = _find("HorizontalPodAutoscaler", "ratings-api")
    assert hpa["apiVersion"] == "autoscaling/v2"
    assert hpa["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": "ratings-api"}
    assert 2 <= hpa["spec"]["minReplicas"] <= hpa["spec"]["maxReplicas"]
    assert {o["kind"] for o in _base_objects() if o["metadata"]["name"] == "ratings-api"} == {
        "Deployment", "Service", "HorizontalPodAutoscaler"}


def test_the_image_exposes_the_api_port():
    """The image's EXPOSE lists 8080 beside the worker's and relay's ports (ENTRYPOINT ratings: `docker run IMAGE api`)."""
    exposed = {p for keyword, args in _dockerfile_instructions() if keyword == "EXPOSE" for p in args.split()}
    assert str(API_PORT) in exposed


def test_compose_runs_the_api_on_the_service_settings():
    """deploy/compose.yaml: an `api` service from the one image, `ratings api --port 8080`, on the
    service's environment, published on loopback 8080 once migrated, its health check on /health."""
    from .test_deploy_files import _compose

    services = _compose()["services"]
    api = services["api"]
    assert api["build"] == {"context": "..", "dockerfile": "deploy/Dockerfile"}
    assert api["command"] == ["api", "--port", str(API_PORT)]
    assert api["environment"] == services["worker"]["environment"]
    assert api["ports"] == [f"127.0.0.1:{API_PORT}:{API_PORT}"]
    assert api["depends_on"]["migrate"]["condition"] == "service_completed_successfully"
    assert f"http://127.0.0.1:{API_PORT}/health" in " ".join(api["healthcheck"]["test"])
