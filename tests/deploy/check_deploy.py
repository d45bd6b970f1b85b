#!/usr/bin/env python3
"""Checks, without a Docker engine or a cluster, that the Dockerfile, deploy/docker-compose.yml,
deploy/k8s/, deploy/kserve/ and the Prometheus files agree with the graphserve they deploy: the
scripts CI runs, the server's default ports, the flags `graphserve --help` lists, the grpc.health.v1
service names and REST health paths, the metric names metrics.cpp registers, and the batch range
AOTInductor packages are exported for; and that every Kubernetes manifest is valid against its
schema (SchemaTest: kubernetes-validate's for Kubernetes' kinds, tests/deploy/schemas/ for the
custom resources), offline.

Environment: SOURCE_DIR (the repository), GRAPHSERVE (the built binary), PROMTOOL.
Run with the project's venv (deploy/install-deps.sh installs PyYAML, jsonschema and
kubernetes-validate there). Arguments select unittest classes.
"""
import copy
import importlib.resources
import json
import os
import pathlib
import re
import sys
import subprocess
import tempfile
import unittest

import jsonschema
import kubernetes_validate
import referencing
import yaml

SOURCE = pathlib.Path(os.environ["SOURCE_DIR"])
DEPLOY = SOURCE / "deploy"


def read(path):
    return (SOURCE / path).read_text()


def default_port(option):
    """The port of ServerOptions' default for `option` (grpc_address, http_address or metrics_address)."""
    header = read("server/include/graphserve/server/process/server.h")
    match = re.search(option + r'\s*=\s*"[^":]*:(\d+)"', header)
    assert match, f"no default for {option} in server.h"
    return int(match.group(1))


GRPC_PORT = default_port("grpc_address")
HTTP_PORT = default_port("http_address")
METRICS_PORT = default_port("metrics_address")


def help_flags():
    """Every --flag `graphserve --help` lists."""
    text = subprocess.run([os.environ["GRAPHSERVE"], "--help"], check=True, capture_output=True,
                          text=True).stdout
    return set(re.findall(r"(--[a-z][a-z0-9-]*)", text))


def flag_value(args, flag):
    return args[args.index(flag) + 1]


def drain_timeout_s(args):
    """--drain-timeout-s as passed, or graphserve's default read from --help."""
    if "--drain-timeout-s" in args:
        return float(flag_value(args, "--drain-timeout-s"))
    text = subprocess.run([os.environ["GRAPHSERVE"], "--help"], check=True, capture_output=True,
                          text=True).stdout
    return float(re.search(r"--drain-timeout-s [^=\n]*=([\d.]+)", text).group(1))


def registered_metrics():
    """Metric family names registered in metrics.cpp, with the series names a histogram adds."""
    source = read("server/src/observability/metrics.cpp")
    names = set(re.findall(r'(?:NewFamily\(|\.Name\()\s*"(graphserve_[a-z_]+)"', source))
    names |= set(re.findall(r'^\s*"(graphserve_[a-z_]+)",\s*$', source, re.M))
    histograms = {n for n in names if n.endswith("_seconds") and "duration" in n}
    for name in histograms:
        names |= {name + "_bucket", name + "_count", name + "_sum"}
    return names


def volume_target(volume):
    """The container path of a compose volume "SOURCE:TARGET[:MODE]"; SOURCE may be ${VAR:-default}."""
    return re.sub(r"\$\{[^}]*\}", "source", volume).split(":")[1]


def compose():
    return yaml.safe_load((DEPLOY / "docker-compose.yml").read_text())


def manifests(folder):
    """(path, object) for every object of every YAML file in deploy/FOLDER."""
    found = []
    for path in sorted((DEPLOY / folder).glob("*.yaml")):
        found += [(path, document) for document in yaml.safe_load_all(path.read_text())]
    return found


def objects_by_kind(folder):
    return {document["kind"]: document for _, document in manifests(folder)}


def k8s_objects():
    return objects_by_kind("k8s")


class DockerfileTest(unittest.TestCase):
    def setUp(self):
        self.text = read("Dockerfile")
        # RUN/CMD lines joined across backslash continuations.
        self.lines = re.sub(r"\\\n", " ", self.text).splitlines()
        self.runs = [line for line in self.lines if line.startswith("RUN ")]

    def test_build_stage_runs_the_scripts_ci_runs(self):
        ci = read(".ci/run") + read("deploy/run-tests.sh")
        self.assertIn("deploy/run-tests.sh", read(".ci/run"))
        for script in ("deploy/install-deps.sh", "deploy/build.sh"):
            self.assertIn(script.split("/")[-1], ci, script)
            self.assertTrue(any(script in run for run in self.runs), f"no RUN calls {script}")
        runtime = [run for run in self.runs if "install-deps.sh --runtime" in run]
        self.assertTrue(runtime, "the runtime stage must install its packages with install-deps.sh")

    def test_build_context_leaves_out_host_build_folders(self):
        # build.sh reuses an existing CMakeCache.txt, which would carry host paths into the image.
        ignored = read(".dockerignore").split()
        for folder in ("/build/", "/build-*/"):
            self.assertIn(folder, ignored)

    def test_each_variant_has_a_build_and_a_runtime_base(self):
        self.assertRegex(self.text, r"(?m)^ARG VARIANT=cuda$")
        stages = dict(re.findall(r"(?m)^FROM (\S+) AS (\S+)$", self.text))
        bases = {stage: image for image, stage in stages.items()}
        for variant in ("cuda", "cpu"):
            for kind in ("build", "runtime"):
                self.assertIn(f"{kind}-{variant}", bases)
            self.assertEqual(bases.get("build"), "build-${VARIANT}")
            self.assertEqual(bases.get("runtime"), "runtime-${VARIANT}")
        self.assertRegex(bases["build-cuda"], r"^nvidia/cuda:.*-devel-ubuntu24\.04$")
        self.assertRegex(bases["runtime-cuda"], r"^nvidia/cuda:.*-ubuntu24\.04$")
        self.assertEqual(bases["build-cpu"], "debian:bookworm")
        # install-deps.sh must know both systems the stages run on.
        script = read("deploy/install-deps.sh")
        self.assertIn("debian:12)", script)
        self.assertIn("ubuntu:24.04)", script)

    def test_runtime_contract(self):
        runtime = self.text[self.text.index("AS runtime\n"):]
        self.assertRegex(runtime, r"(?m)^USER (?!root|0\b)\S+")
        self.assertEqual(sorted(map(int, re.search(r"(?m)^EXPOSE (.*)$", runtime).group(1).split())),
                         sorted([HTTP_PORT, GRPC_PORT, METRICS_PORT]))
        self.assertIn('VOLUME ["/models"]', runtime)
        self.assertIn("--model-repository /models", runtime)
        # Unset, the probe is plaintext gRPC on the default port; the variables reach graphserve-cli.
        command = self.health_probe(runtime)
        self.assertEqual(command[:2], ["graphserve-cli", "health"])
        self.assertTrue(flag_value(command, "--address").endswith(f":{GRPC_PORT}"))
        args = ["--tls-ca-file", "/tls/ca.pem", "--auth-token-file", "/run/secrets/token"]
        command = self.health_probe(runtime, GRAPHSERVE_HEALTH_ADDRESS="localhost:9001",
                                    GRAPHSERVE_HEALTH_ARGS=" ".join(args))
        self.assertEqual(flag_value(command, "--address"), "localhost:9001")
        self.assertEqual(command[-len(args):], args)

    def health_probe(self, runtime, **env):
        """The HEALTHCHECK's command as the container's /bin/sh expands it with `env` set."""
        health = re.search(r"(?m)^HEALTHCHECK .*? CMD (?!\[)(.*)$", re.sub(r"\\\n", " ", runtime))
        self.assertIsNotNone(health, "HEALTHCHECK in the shell form, so that its variables expand")
        with tempfile.TemporaryDirectory() as stub:
            cli = pathlib.Path(stub, "graphserve-cli")
            cli.write_text('#!/bin/sh\nprintf "%s\\n" graphserve-cli "$@"\n')
            cli.chmod(0o755)
            result = subprocess.run(["/bin/sh", "-c", health.group(1)], capture_output=True, text=True,
                                    env={"PATH": f"{stub}:/usr/bin:/bin", **env}, check=True)
        return result.stdout.splitlines()


class ComposeTest(unittest.TestCase):
    def setUp(self):
        self.compose = compose()
        self.services = self.compose["services"]

    def graphserve_services(self):
        return {name: s for name, s in self.services.items() if name.startswith("graphserve")}

    def test_graphserve_ports_flags_and_grace_period(self):
        flags = help_flags()
        variants = self.graphserve_services()
        self.assertEqual(set(variants), {"graphserve", "graphserve-cpu"})
        for name, service in variants.items():
            # /metrics on loopback only: Prometheus reaches it over the compose network.
            self.assertEqual(sorted(service["ports"]),
                             sorted([f"{HTTP_PORT}:{HTTP_PORT}", f"{GRPC_PORT}:{GRPC_PORT}",
                                     f"127.0.0.1:{METRICS_PORT}:{METRICS_PORT}"]), name)
            for arg in service["command"]:
                if arg.startswith("--"):
                    self.assertIn(arg, flags, f"{name}: graphserve has no {arg}")
            grace = int(re.fullmatch(r"(\d+)s", service["stop_grace_period"]).group(1))
            self.assertGreater(grace, drain_timeout_s(service["command"]), name)
            self.assertIn("/models", [volume_target(v) for v in service["volumes"]], name)
        self.assertEqual(drain_timeout_s([]), 30.0)  # the default, read from --help

    def test_profiles_gpu_by_default_cpu_on_request(self):
        gpu, cpu = self.services["graphserve"], self.services["graphserve-cpu"]
        self.assertEqual(gpu["profiles"], ["gpu"])
        self.assertEqual(gpu["build"]["args"]["VARIANT"], "cuda")
        devices = gpu["deploy"]["resources"]["reservations"]["devices"]
        self.assertEqual(devices[0]["driver"], "nvidia")
        self.assertIn("gpu", devices[0]["capabilities"])
        self.assertEqual(cpu["profiles"], ["cpu"])
        self.assertEqual(cpu["build"]["args"]["VARIANT"], "cpu")
        self.assertNotIn("deploy", cpu)
        # Both answer to the name Prometheus scrapes.
        self.assertIn("graphserve", cpu["networks"]["default"]["aliases"])
        env = dict(line.split("=", 1) for line in (DEPLOY / ".env").read_text().splitlines()
                   if line and not line.startswith("#"))
        self.assertEqual(env["COMPOSE_PROFILES"], "gpu")
        for name in ("prometheus", "grafana"):
            self.assertNotIn("profiles", self.services[name], f"{name} must run in every profile")

    def test_prometheus_scrapes_the_service_and_loads_its_rules(self):
        prometheus = self.services["prometheus"]
        mounted = {}
        for volume in prometheus["volumes"]:
            source, target = volume.split(":")[:2]
            self.assertTrue((DEPLOY / source).exists(), source)
            mounted[pathlib.PurePosixPath(target).name] = source
        config = yaml.safe_load((DEPLOY / "prometheus.yml").read_text())
        targets = config["scrape_configs"][0]["static_configs"][0]["targets"]
        self.assertEqual(targets, [f"graphserve:{METRICS_PORT}"])
        for rule_file in config["rule_files"]:
            self.assertIn(rule_file, mounted, "a rule file prometheus.yml loads is not mounted")

    def test_grafana_gets_the_datasource_and_dashboard(self):
        grafana = self.services["grafana"]
        targets = {}
        for volume in grafana["volumes"]:
            source, target = volume.split(":")[:2]
            self.assertTrue((DEPLOY / source).is_dir(), source)
            targets[target] = source
        self.assertEqual(targets["/etc/grafana/provisioning"], "./grafana/provisioning")
        provider = yaml.safe_load((DEPLOY / "grafana/provisioning/dashboards/graphserve.yml").read_text())
        dashboards_dir = provider["providers"][0]["options"]["path"]
        self.assertEqual(targets[dashboards_dir], "./grafana/dashboards")
        home = grafana["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
        self.assertTrue((DEPLOY / targets[dashboards_dir] / pathlib.PurePosixPath(home).name).is_file())
        datasource = yaml.safe_load(
            (DEPLOY / "grafana/provisioning/datasources/prometheus.yml").read_text())["datasources"][0]
        self.assertEqual(datasource["url"], "http://prometheus:9090")
        self.assertIn("127.0.0.1:9090:9090", self.services["prometheus"]["ports"])

    def test_unauthenticated_tools_are_local_and_grafana_has_no_default_admin(self):
        for name in ("prometheus", "grafana"):
            for port in self.services[name]["ports"]:
                self.assertTrue(port.startswith("127.0.0.1:"), f"{name} publishes {port} beyond localhost")
        environment = self.services["grafana"]["environment"]
        self.assertEqual(environment.get("GF_SECURITY_DISABLE_INITIAL_ADMIN_CREATION"), "true")
        self.assertNotIn("GF_SECURITY_ADMIN_PASSWORD", environment)


class GrafanaDashboardTest(unittest.TestCase):
    """The dashboard's grid: Grafana loads overlapping or out-of-grid panels without a word and
    rearranges them, so a layout mistake shows only on screen."""

    def setUp(self):
        self.panels = json.loads(read("deploy/grafana/dashboards/graphserve.json"))["panels"]

    def test_panels_tile_the_grid_without_overlap(self):
        ids = [panel["id"] for panel in self.panels]
        self.assertEqual(len(ids), len(set(ids)), "panel ids repeat")
        owner = {}
        for panel in self.panels:
            grid = panel["gridPos"]
            self.assertTrue(grid["w"] > 0 and grid["h"] > 0 and grid["x"] >= 0 and grid["y"] >= 0,
                            panel["title"])
            self.assertLessEqual(grid["x"] + grid["w"], 24, f"{panel['title']} is wider than the grid")
            if panel["type"] == "row":
                self.assertEqual((grid["x"], grid["w"], grid["h"]), (0, 24, 1), panel["title"])
            for x in range(grid["x"], grid["x"] + grid["w"]):
                for y in range(grid["y"], grid["y"] + grid["h"]):
                    if (x, y) in owner:
                        self.fail(f"{panel['title']} overlaps {owner[(x, y)]}")
                    owner[(x, y)] = panel["title"]


class KubernetesTest(unittest.TestCase):
    def setUp(self):
        self.objects = k8s_objects()
        self.pod = self.objects["Deployment"]["spec"]["template"]
        self.container = self.pod["spec"]["containers"][0]

    def test_kustomization_lists_every_manifest(self):
        listed = set(self.objects["Kustomization"]["resources"])
        present = {p.name for p in (DEPLOY / "k8s").glob("*.yaml")} - {"kustomization.yaml"}
        self.assertEqual(listed, present)

    def test_ports_flags_and_gpu(self):
        ports = {p["name"]: p["containerPort"] for p in self.container["ports"]}
        self.assertEqual(ports, {"http": HTTP_PORT, "grpc": GRPC_PORT, "metrics": METRICS_PORT})
        flags = help_flags()
        for arg in self.container["args"]:
            if arg.startswith("--"):
                self.assertIn(arg, flags)
        self.assertEqual(self.container["resources"]["limits"]["nvidia.com/gpu"], 1)
        self.assertEqual(self.pod["spec"]["securityContext"]["runAsNonRoot"], True)

    def test_container_runs_read_only_without_capabilities(self):
        security = self.container["securityContext"]
        self.assertIs(security["readOnlyRootFilesystem"], True)
        self.assertEqual(security["capabilities"]["drop"], ["ALL"])
        self.assertIs(security["allowPrivilegeEscalation"], False)
        self.assertEqual(security["seccompProfile"]["type"], "RuntimeDefault")
        # The one writable place: /tmp, where AOTInductor unpacks .pt2 packages.
        mounts = {m["mountPath"]: m["name"] for m in self.container["volumeMounts"]}
        volumes = {v["name"]: v for v in self.pod["spec"]["volumes"]}
        self.assertIn("emptyDir", volumes[mounts["/tmp"]])
        self.assertTrue(all(m.get("readOnly") for m in self.container["volumeMounts"] if m["mountPath"] != "/tmp"))

    def test_probes_ask_the_health_services_graphserve_registers(self):
        server = read("server/src/process/server.cpp")
        self.assertIn("EnableDefaultHealthCheckService(true)", server)
        readiness = self.container["readinessProbe"]["grpc"]
        liveness = self.container["livenessProbe"]["grpc"]
        self.assertEqual(readiness["port"], GRPC_PORT)
        self.assertEqual(liveness["port"], GRPC_PORT)
        # "" follows readiness; the liveness name must be the one server.cpp sets SERVING at once.
        self.assertEqual(readiness.get("service", ""), "")
        self.assertIn(f'kLivenessServiceName = "{liveness["service"]}"', server)

    def test_termination_grace_outlasts_prestop_and_drain(self):
        pre_stop = self.container["lifecycle"]["preStop"]["exec"]["command"]
        self.assertEqual(pre_stop[0], "sleep")
        budget = int(pre_stop[1]) + drain_timeout_s(self.container["args"])
        self.assertGreater(self.pod["spec"]["terminationGracePeriodSeconds"], budget)

    def test_service_and_servicemonitor_select_the_pods_and_ports(self):
        service = self.objects["Service"]
        monitor = self.objects["ServiceMonitor"]
        labels = self.pod["metadata"]["labels"]
        self.assertEqual(service["spec"]["clusterIP"], "None")
        self.assertTrue(set(service["spec"]["selector"].items()) <= set(labels.items()))
        container_ports = {p["name"] for p in self.container["ports"]}
        service_ports = {}
        for port in service["spec"]["ports"]:
            self.assertIn(port["targetPort"], container_ports)
            service_ports[port["name"]] = port["port"]
        self.assertEqual(service_ports, {"http": HTTP_PORT, "grpc": GRPC_PORT, "metrics": METRICS_PORT})
        self.assertTrue(set(monitor["spec"]["selector"]["matchLabels"].items())
                        <= set(service["metadata"]["labels"].items()))
        endpoint = monitor["spec"]["endpoints"][0]
        self.assertIn(endpoint["port"], service_ports)
        self.assertEqual(endpoint["path"], "/metrics")


class KServeTest(unittest.TestCase):
    """deploy/kserve/: the ServingRuntime against graphserve's flags, health paths, platforms and
    drain, and the InferenceService against the runtime and graphserve's metrics."""

    # What KServe does where the manifests say nothing (its pkg/constants): the port it sends REST
    # traffic to, and the pod's grace period, which a ServingRuntime cannot set.
    KSERVE_HTTP_PORT = 8080
    KUBERNETES_DEFAULT_GRACE_S = 30

    def setUp(self):
        self.objects = objects_by_kind("kserve")
        self.runtime = self.objects["ServingRuntime"]
        self.service = self.objects["InferenceService"]
        self.container = self.runtime["spec"]["containers"][0]
        self.args = self.container["args"]
        self.predictor = self.service["spec"]["predictor"]

    def address_port(self, flag):
        return int(flag_value(self.args, flag).rsplit(":", 1)[1])

    def test_kustomization_lists_every_manifest(self):
        listed = set(self.objects["Kustomization"]["resources"])
        present = {p.name for p in (DEPLOY / "kserve").glob("*.yaml")} - {"kustomization.yaml"}
        self.assertEqual(listed, present)

    def test_args_are_graphserve_flags_serving_kserves_model_folder(self):
        flags = help_flags()
        for arg in self.args:
            if arg.startswith("--"):
                self.assertIn(arg, flags, f"graphserve has no {arg}")
        # KServe's storage initializer downloads storageUri to /mnt/models.
        self.assertEqual(flag_value(self.args, "--model-repository"), "/mnt/models")
        self.assertEqual(self.container["name"], "kserve-container")

    def test_ports_are_the_ones_graphserve_listens_on(self):
        ports = [(p["name"], p["containerPort"]) for p in self.container["ports"]]
        # KServe publishes the first port on the Service's port 80: REST, where it sends traffic.
        self.assertEqual(ports[0], ("http", self.KSERVE_HTTP_PORT))
        self.assertEqual(dict(ports), {"http": self.address_port("--http-address"),
                                       "grpc": self.address_port("--grpc-address"),
                                       "metrics": self.address_port("--metrics-address")})
        annotations = self.runtime["spec"]["annotations"]
        self.assertEqual(int(annotations["prometheus.kserve.io/port"]), dict(ports)["metrics"])
        self.assertEqual(annotations["prometheus.kserve.io/path"], "/metrics")

    def test_probes_ask_graphserves_rest_health_paths(self):
        rest = read("server/src/http/rest_endpoint.cpp")
        self.assertIn('path[1] == "health"', rest)
        self.assertIn('path[2] == "live" || path[2] == "ready"', rest)
        http_port = self.address_port("--http-address")
        for probe, path in (("readinessProbe", "/v2/health/ready"), ("livenessProbe", "/v2/health/live")):
            self.assertEqual(self.container[probe]["httpGet"], {"path": path, "port": http_port}, probe)
        # Liveness must hold during a long warm-up: the REST port listens before the models load.
        server = read("server/src/process/server.cpp")
        self.assertLess(server.index("StartRestEndpoint(options, limits)"), server.index("repository_->Start("))

    def test_grace_period_outlasts_prestop_and_drain(self):
        pre_stop = self.container["lifecycle"]["preStop"]["exec"]["command"]
        self.assertEqual(pre_stop[0], "sleep")
        budget = int(pre_stop[1]) + drain_timeout_s(self.args)
        # An InferenceService that sets no grace period gets Kubernetes' default.
        self.assertGreater(self.KUBERNETES_DEFAULT_GRACE_S, budget)
        self.assertGreater(self.predictor["terminationGracePeriodSeconds"], budget)

    def test_formats_are_graphserves_platforms(self):
        formats = {f["name"] for f in self.runtime["spec"]["supportedModelFormats"]}
        platform = re.search(r'kPlatformAotInductor = "(\w+)"',
                             read("graph_engine/include/graphserve/engine/model_spec.h")).group(1)
        self.assertEqual(formats, {platform, "pytorch"})
        # Only graphserve's own format is picked unasked: KServe's PyTorch runtimes claim "pytorch".
        chosen = {f["name"] for f in self.runtime["spec"]["supportedModelFormats"] if f.get("autoSelect")}
        self.assertEqual(chosen, {platform})
        self.assertEqual(set(self.runtime["spec"]["protocolVersions"]), {"v2", "grpc-v2"})

    def test_runs_read_only_without_capabilities(self):
        security = self.container["securityContext"]
        self.assertIs(security["runAsNonRoot"], True)
        self.assertIs(security["readOnlyRootFilesystem"], True)
        self.assertEqual(security["capabilities"]["drop"], ["ALL"])
        self.assertIs(security["allowPrivilegeEscalation"], False)
        mounts = {m["mountPath"]: m["name"] for m in self.container["volumeMounts"]}
        volumes = {v["name"]: v for v in self.runtime["spec"]["volumes"]}
        self.assertIn("emptyDir", volumes[mounts["/tmp"]])

    def test_inference_service_uses_the_runtime(self):
        model = self.predictor["model"]
        self.assertEqual(model["runtime"], self.runtime["metadata"]["name"])
        formats = [(f["name"], f.get("version")) for f in self.runtime["spec"]["supportedModelFormats"]]
        self.assertIn((model["modelFormat"]["name"], model["modelFormat"].get("version")), formats)
        self.assertIn(model["protocolVersion"], self.runtime["spec"]["protocolVersions"])
        self.assertTrue(model["storageUri"])

    def test_keda_scales_on_graphserves_scheduler_queue(self):
        annotations = self.service["metadata"]["annotations"]
        # KEDA scaling needs the Standard (raw Deployment) mode.
        self.assertEqual(annotations["serving.kserve.io/deploymentMode"], "Standard")
        self.assertEqual(annotations["serving.kserve.io/autoscalerClass"], "keda")
        self.assertGreaterEqual(self.predictor["minReplicas"], 1, "a cold replica must warm up first")
        self.assertGreater(self.predictor["maxReplicas"], self.predictor["minReplicas"])
        [metric] = self.predictor["autoScaling"]["metrics"]
        self.assertEqual(metric["type"], "External")
        self.assertEqual(metric["external"]["metric"]["backend"], "prometheus")
        query = metric["external"]["metric"]["query"]
        self.assertEqual(set(re.findall(r"\bgraphserve_[a-z_]+", query)), {"graphserve_requests_in_flight"})
        # The predictor's pods are named after the InferenceService.
        self.assertIn(f'pod=~"{self.service["metadata"]["name"]}-predictor-.*"', query)
        self.assertGreater(float(metric["external"]["target"]["value"]), 0)


class SchemaTest(unittest.TestCase):
    """Every manifest under deploy/k8s and deploy/kserve against its schema, offline: Kubernetes'
    kinds with kubernetes-validate's strict schemas, at the oldest and the newest Kubernetes it
    carries; the custom resources with tests/deploy/schemas/ (its README says how they are written),
    whose Kubernetes types resolve to the same strict definitions."""

    FOLDERS = ("k8s", "kserve")
    # The oldest release kubernetes-validate 1.37 carries (graphserve's manifests need 1.24, for
    # native gRPC probes), and the newest.
    KUBERNETES_VERSIONS = ("1.25.0", kubernetes_validate.latest_version())

    def setUp(self):
        self.custom = {}
        for path in (pathlib.Path(__file__).parent / "schemas").glob("*.yaml"):
            schema = yaml.safe_load(path.read_text())
            jsonschema.Draft202012Validator.check_schema(schema)
            kinds = schema["properties"]["kind"]
            for kind in kinds.get("enum", [kinds.get("const")]):
                self.custom[(schema["properties"]["apiVersion"]["const"], kind)] = schema

    def definitions(self, version):
        """kubernetes-validate's strict definitions of a release, under the URI its schemas use."""
        folder = importlib.resources.files("kubernetes_validate") / "kubernetes-json-schema"
        contents = json.loads((folder / f"v{version}-local-strict" / "_definitions.json").read_text())
        return referencing.Registry().with_resource(contents["$id"],
                                                    referencing.Resource.from_contents(contents))

    def errors(self, document, version):
        """Where and why `document` breaks its schema at Kubernetes `version`; [] when it is valid."""
        key = (document.get("apiVersion"), document.get("kind"))
        if key in self.custom:
            validator = jsonschema.Draft202012Validator(self.custom[key], registry=self.definitions(version))
            return [f"{'.'.join(map(str, e.absolute_path))}: {e.message}"
                    for e in validator.iter_errors(document)]
        try:
            kubernetes_validate.validate(document, version, strict=True)
        except kubernetes_validate.ValidationError as error:
            return [f"{'.'.join(map(str, error.absolute_path))}: {error.message}"]
        except kubernetes_validate.SchemaNotFoundError as error:
            return [error.message + " (and no schema in tests/deploy/schemas/)"]
        return []

    def test_every_manifest_matches_its_schema(self):
        checked = 0
        for folder in self.FOLDERS:
            for path, document in manifests(folder):
                for version in self.KUBERNETES_VERSIONS:
                    with self.subTest(manifest=f"{folder}/{path.name}", kind=document["kind"], kubernetes=version):
                        self.assertEqual(self.errors(document, version), [])
                        checked += 1
        kinds = {d["kind"] for folder in self.FOLDERS for _, d in manifests(folder)}
        self.assertTrue({"Deployment", "Service", "ServiceMonitor", "ServingRuntime", "InferenceService",
                         "Kustomization"} <= kinds, kinds)
        self.assertGreater(checked, 0)

    def broken(self, kind, change):
        """A copy of the manifest of `kind` with `change` applied to it."""
        document = copy.deepcopy(next(d for f in self.FOLDERS for _, d in manifests(f) if d["kind"] == kind))
        change(document)
        return document

    def test_a_broken_manifest_fails(self):
        def runtime_container(d):
            return d["spec"]["containers"][0]

        def predictor(d):
            return d["spec"]["predictor"]

        cases = {
            # Kubernetes' own kinds, through kubernetes-validate.
            "Deployment with a string port": ("Deployment", lambda d: d["spec"]["template"]["spec"]["containers"][0]
                                              ["ports"][0].update(containerPort="8000")),
            "Deployment with a misspelt field": ("Deployment", lambda d: d["spec"]["template"]["spec"].update(
                terminationGracePeriod=45)),
            "Service without ports' numbers": ("Service", lambda d: [p.pop("port") for p in d["spec"]["ports"]]),
            # Custom resources, through tests/deploy/schemas/, their Kubernetes types included.
            "ServingRuntime probe on a missing path field": ("ServingRuntime", lambda d: runtime_container(d)
                                                             ["readinessProbe"]["httpGet"].pop("port")),
            "ServingRuntime with an unknown protocol": ("ServingRuntime", lambda d: d["spec"].update(
                protocolVersions=["v2", "grpc-v3"])),
            "ServingRuntime with a misspelt field": ("ServingRuntime", lambda d: d["spec"].update(
                supportedModelTypes=d["spec"].pop("supportedModelFormats"))),
            "ServingRuntime container without a name": ("ServingRuntime", lambda d: runtime_container(d).pop("name")),
            "InferenceService with a string replica count": ("InferenceService", lambda d: predictor(d).update(
                maxReplicas="4")),
            "InferenceService with an unknown autoscaler": ("InferenceService", lambda d: d["metadata"]
                                                            ["annotations"].update(
                                                                {"serving.kserve.io/autoscalerClass": "kpa-typo"})),
            "InferenceService metric without its query": ("InferenceService", lambda d: predictor(d)["autoScaling"]
                                                          ["metrics"][0]["external"]["metric"].pop("query")),
            "InferenceService model without a format": ("InferenceService", lambda d: predictor(d)["model"].pop(
                "modelFormat")),
            "ServiceMonitor with a bad interval": ("ServiceMonitor", lambda d: d["spec"]["endpoints"][0].update(
                interval="5 seconds")),
            "Kustomization with a non-list": ("Kustomization", lambda d: d.update(resources="deployment.yaml")),
        }
        for name, (kind, change) in cases.items():
            with self.subTest(name):
                document = self.broken(kind, change)
                for version in self.KUBERNETES_VERSIONS:
                    self.assertNotEqual(self.errors(document, version), [], f"{name} passed at {version}")

    def test_a_kind_without_a_schema_fails(self):
        document = {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}}
        self.assertRegex(self.errors(document, self.KUBERNETES_VERSIONS[-1])[0], "schema")


class MetricNamesTest(unittest.TestCase):
    def test_every_metric_named_in_docs_rules_and_manifests_exists(self):
        # The README and every page of docs/ (docs/metrics.md lists the families; other pages name
        # the ones they rely on).
        known = registered_metrics()
        # The built-in model's platform shares the prefix; it is no metric.
        platform = re.search(r'kPlatformBuiltinEncoder = "(\w+)"',
                             read("graph_engine/include/graphserve/engine/model_spec.h")).group(1)
        self.assertIn("graphserve_requests_total", known)
        self.assertIn("graphserve_queue_duration_seconds_bucket", known)
        files = ["README.md", "deploy/prometheus-alerts.yml", "deploy/docker-compose.yml",
                 *[str(p.relative_to(SOURCE)) for p in (DEPLOY / "k8s").glob("*.yaml")],
                 *[str(p.relative_to(SOURCE)) for p in (DEPLOY / "kserve").glob("*.yaml")],
                 *[str(p.relative_to(SOURCE)) for p in (SOURCE / "docs").rglob("*.md")]]
        for name in files:
            for metric in set(re.findall(r"\bgraphserve_[a-z_]+", read(name))) - {platform}:
                self.assertIn(metric, known, f"{name} names {metric}, which graphserve does not export")


class ExportedBatchRangeTest(unittest.TestCase):
    def test_aoti_export_covers_the_default_grids_largest_batch(self):
        # A package exported for fewer rows than the default grid batches is refused at load.
        header = read("graph_engine/include/graphserve/engine/model_spec.h")
        largest = re.search(r"kDefaultLargestBatch = (\d+);", header)
        self.assertIsNotNone(largest, "no kDefaultLargestBatch in model_spec.h")
        exported = re.search(r"^DEFAULT_LARGEST_BATCH = (\d+)$", read("deploy/models/aoti_export.py"), re.M)
        self.assertIsNotNone(exported, "no DEFAULT_LARGEST_BATCH in aoti_export.py")
        self.assertEqual(exported.group(1), largest.group(1))


class NoRegistryHostTest(unittest.TestCase):
    """Scripts, images and docs reach packages through the machine's own apt and pip configuration
    (or a variable the user sets), so no URL in them may name a host other than the local services."""

    LOCAL_HOSTS = {"localhost", "127.0.0.1", "HOST", "prometheus", "grafana", "graphserve"}
    # A Kubernetes Service's in-cluster name (NAME.NAMESPACE.svc), such as the Prometheus KEDA asks.
    CLUSTER_SERVICE = re.compile(r"[a-z0-9-]+\.[a-z0-9-]+\.svc")

    def test_only_local_services_are_named(self):
        files = ["Dockerfile", "README.md", "BENCHMARKS.md", ".ci/run",
                 *[str(p.relative_to(SOURCE)) for p in (SOURCE / "deploy").rglob("*")
                   if p.is_file() and p.suffix in (".sh", ".yml", ".yaml", ".py", ".env", ".md")],
                 *[str(p.relative_to(SOURCE)) for p in (SOURCE / "docs").rglob("*.md")],
                 *[str(p.relative_to(SOURCE)) for p in (SOURCE / "cmake").glob("*")]]
        for name in files:
            for scheme, host in re.findall(r"\b([a-z][a-z0-9+.-]*)://([^/:\s\"'`)]+)", read(name)):
                # KServe's pvc://CLAIM/PATH names a PersistentVolumeClaim, not a host.
                if scheme != "pvc" and not self.CLUSTER_SERVICE.fullmatch(host):
                    self.assertIn(host, self.LOCAL_HOSTS, f"{name} names the host {host}")


class PromtoolTest(unittest.TestCase):
    def setUp(self):
        # CMake passes PROMTOOL-NOTFOUND where Debian's prometheus package is absent (the CUDA host).
        if not os.environ.get("PROMTOOL") or os.environ["PROMTOOL"].endswith("NOTFOUND"):
            self.skipTest("promtool not found (Debian package prometheus)")

    def promtool(self, *args):
        result = subprocess.run([os.environ["PROMTOOL"], *args], capture_output=True, text=True)
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)

    def test_config_and_rules_are_valid(self):
        self.promtool("check", "config", str(DEPLOY / "prometheus.yml"))
        self.promtool("check", "rules", str(DEPLOY / "prometheus-alerts.yml"))


if __name__ == "__main__":
    outcome = unittest.main(verbosity=2, exit=False).result
    if not outcome.wasSuccessful():
        sys.exit(1)
    # 77: ctest's SKIP_RETURN_CODE, so a suite that could not run shows as skipped, not passed.
    sys.exit(77 if outcome.testsRun and len(outcome.skipped) == outcome.testsRun else 0)
