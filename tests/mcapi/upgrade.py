# Runs magnum-cluster-api's real `UbuntuDriver().upgrade_cluster` (the full install: Magnum,
# oslo, pykube, the compiled driver; tests/mcapi/constraints.txt) for one cluster and reports
# what it wrote. Driven by tests/mcapi_upgrade.rs.
#
# Usage: python upgrade.py < request.json > answer.json, the request being
#   {"uuid", "stack_id", "network_driver", "labels": {cluster's labels before},
#    "template_labels": {the new cluster template's labels},
#    "apiserver": {"kubeconfig", "url", "token", "ca_file"} (optional: a real management
#    cluster's kube-apiserver, see below)}
# The answer:
#   {"version": magnum-cluster-api's, "labels_before", "labels_after": the cluster's labels after
#    the call,
#    "image_before", "image_after": the OCCM DaemonSet's image in the cloud-provider Secret,
#    "data_before", "data_after": that Secret's data (decoded), "keys_after": its keys,
#    "secret_write": the last request that wrote the Secret (method, path, body as sent),
#    "topology_version": the Cluster API Cluster's spec.topology.version after the call,
#    "requests": every request the driver made ("METHOD path"), "seconds": the call's time}
#
# With "apiserver" (tests/mcapi_upgrade.rs's real management cluster: kube-apiserver, Cluster
# API's core, kubeadm control plane and bootstrap managers with their conversion webhooks and
# ClusterTopology on, the OpenStack provider's CRDs), the imitation below is not started: the
# driver talks to that apiserver with the identity of the kubeconfig, and creates the cluster
# itself first, as its create_cluster does (the ClusterClass and its templates, the cloud-config
# Secret, the cloud-provider ClusterResourceSet and Secret, the topology-managed Cluster), but
# for the cluster CA Secrets (their certificates come from Magnum's certificate store, Barbican
# or its database, which are not here) and its validation against Nova and Glance. Then
# "requests" and "secret_write" are empty: the apiserver's audit log tells them.
#
# What is real: every line of magnum-cluster-api 0.38.2 (its Python and its compiled Rust
# driver, which renders the OCCM chart with `helm template`, so helm must be on PATH), Magnum's
# RequestContext, pykube, the kubernetes client and sherlock's Lease lock. What is imitated:
#   - the management cluster's kube-apiserver: an in-process HTTP server that stores objects by
#     path and answers what the driver sends during an upgrade (create, get, list with a label
#     selector, replace with a resourceVersion check, delete; anything else is refused, 405),
#     turning a Secret's stringData into data as the apiserver does; no discovery, admission,
#     validation or watch. The workload cluster (`<stack_id>-kubeconfig`, where the driver
#     deletes old CSI workloads and looks for OCCM DaemonSets) is the same server;
#   - OpenStack: a client object answering the calls the driver makes (the Keystone URL, one
#     flavor, one image with os_distro, server groups, no Cinder or Manila service);
#   - Magnum's database objects: plain objects with the attributes the driver reads, and a
#     NodeGroup.save() that does nothing;
#   - the cluster's history: its cloud-config Secret (clouds.yaml with an application
#     credential) and Cluster API Cluster are written by this program; the cloud-provider Secret
#     before the upgrade is the driver's own (CloudProviderClusterResourcesSecret.apply with the
#     labels before).
import base64
import copy
import http.server
import json
import os
import sys
import tempfile
import threading
import time
import types
import urllib.parse
import uuid as uuidlib

import yaml

OCCM = "openstack-cloud-controller-manager"
# Glance's ID of the cluster's image: a UUID, as Glance gives (the OpenStack provider's CRDs
# require one in OpenStackMachineTemplate's spec.template.spec.image.id).
IMAGE_ID = "0b8a3c6e-5d4f-4a1b-9c2d-7e6f5a4b3c2d"
OCCM_KEY = "cloud-controller-manager.yaml"
NS = "magnum-system"


class Store:
    """The fake apiserver's objects, keyed by their path (collection + '/' + name)."""

    def __init__(self):
        self.objects = {}
        self.version = 0
        self.requests = []
        self.lock = threading.Lock()

    def stamp(self, obj):
        self.version += 1
        meta = obj.setdefault("metadata", {})
        meta["resourceVersion"] = str(self.version)
        meta.setdefault("uid", str(uuidlib.uuid4()))
        meta.setdefault("creationTimestamp", "2026-12-01T00:00:00Z")
        if obj.get("kind") == "Secret" and "stringData" in obj:
            data = obj.setdefault("data", {})
            for k, v in obj.pop("stringData").items():
                data[k] = base64.b64encode(v.encode()).decode()
        return obj

    def put(self, path, obj):
        self.objects[path] = self.stamp(copy.deepcopy(obj))
        return self.objects[path]


def split_path(path):
    """(collection, name, subresource) of an object path; name None for a collection."""
    parts = path.strip("/").split("/")
    base = 2 if parts[0] == "api" else 3
    rest = parts[base:]
    if rest[:1] == ["namespaces"] and len(rest) >= 3:
        coll = "/" + "/".join(parts[:base] + rest[:3])
        rest = rest[3:]
    else:
        coll = "/" + "/".join(parts[: base + 1])
        rest = rest[1:]
    return coll, (rest[0] if rest else None), (rest[1] if len(rest) > 1 else None)


def selected(obj, selector):
    """Whether `obj` matches a label selector of `key=value` terms."""
    labels = obj.get("metadata", {}).get("labels") or {}
    for term in filter(None, (selector or "").split(",")):
        k, _, v = term.partition("=")
        if labels.get(k) != v.lstrip("="):
            return False
    return True


def handler_for(store):
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def answer(self, status, body):
            raw = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        def status(self, code, reason, message):
            self.answer(
                code,
                {
                    "kind": "Status",
                    "apiVersion": "v1",
                    "status": "Failure",
                    "reason": reason,
                    "message": message,
                    "code": code,
                },
            )

        def body(self):
            n = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(n) if n else b""
            if not raw:
                return None
            return json.loads(raw)

        def handle_any(self, method):
            url = urllib.parse.urlsplit(self.path)
            path, params = url.path, urllib.parse.parse_qs(url.query)
            body = self.body()  # read always: a DELETE carries DeleteOptions
            with store.lock:
                store.requests.append(
                    {
                        "method": method,
                        "path": path,
                        "content_type": self.headers.get("Content-Type", ""),
                        "body": body,
                    }
                )
                self.serve(method, path, params, body)
            if os.environ.get("UPGRADE_TRACE"):
                print(method, self.path, file=sys.stderr)

        def serve(self, method, path, params, body):
            try:
                coll, name, sub = split_path(path)
            except IndexError:
                return self.status(404, "NotFound", path)
            key = f"{coll}/{name}"
            current = store.objects.get(key)
            if method == "GET" and name is None:
                sel = params.get("labelSelector", [""])[0]
                items = [
                    o
                    for k, o in sorted(store.objects.items())
                    if k.rsplit("/", 1)[0] == coll and selected(o, sel)
                ]
                meta = {"resourceVersion": str(store.version)}
                return self.answer(200, {"kind": "List", "metadata": meta, "items": items})
            if method == "POST":
                name = body["metadata"]["name"]
                if f"{coll}/{name}" in store.objects:
                    return self.status(409, "AlreadyExists", f"{name} already exists")
                return self.answer(201, store.put(f"{coll}/{name}", body))
            if current is None:
                return self.status(404, "NotFound", f"{key} not found")
            if method == "GET":
                return self.answer(200, current)
            if method == "DELETE":
                del store.objects[key]
                return self.answer(200, {"kind": "Status", "status": "Success"})
            if method == "PUT" and sub is None:
                want = body.get("metadata", {}).get("resourceVersion")
                if want and want != current["metadata"]["resourceVersion"]:
                    return self.status(409, "Conflict", f"{key}: resourceVersion {want} is stale")
                return self.answer(200, store.put(key, body))
            # PATCH, subresources: the driver sends none during an upgrade; a version that does
            # fails here, loudly.
            return self.status(405, "MethodNotAllowed", f"{method} {path} is not imitated")

        def do_GET(self):
            self.handle_any("GET")

        def do_POST(self):
            self.handle_any("POST")

        def do_PUT(self):
            self.handle_any("PUT")

        def do_PATCH(self):
            self.handle_any("PATCH")

        def do_DELETE(self):
            self.handle_any("DELETE")

    return Handler


def serve(store):
    """Starts the fake apiserver on 127.0.0.1; returns its URL."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler_for(store))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{server.server_address[1]}"


class FakeOpenStack:
    """The OpenStack calls magnum-cluster-api makes during an upgrade, answered."""

    def __init__(self, context=None):
        self.context = context

    def url_for(self, **kwargs):
        return "https://keystone.example:5000/v3"

    def create_application_credential(self, user_id, name, description):
        return types.SimpleNamespace(id="0123", secret="not-a-real-secret")

    def cinder_region_name(self):
        return "RegionOne"

    def is_service_enabled(self, service_type):
        return False

    def list_flavors(self):
        return [
            types.SimpleNamespace(
                id="flavor-1", name="m1.medium", vcpus=2, ram=4096, disk=40
            )
        ]

    def list_server_groups(self, all_projects=False):
        return []

    def create_server_group(self, name, policies):
        return types.SimpleNamespace(id=str(uuidlib.uuid5(uuidlib.NAMESPACE_DNS, name)))

    def list_volume_types(self):
        return []

    def get_default_volume_type(self):
        return types.SimpleNamespace(name="__DEFAULT__")

    def glance(self):
        image = Resource(id=IMAGE_ID, name="ubuntu-2204-kube", os_distro="ubuntu")
        return types.SimpleNamespace(find_image=lambda ref, ignore_missing=False: image)


class Resource(dict):
    """An openstacksdk resource: read as attributes and as a dict."""

    __getattr__ = dict.__getitem__


class NodeGroup(types.SimpleNamespace):
    """A magnum.objects.NodeGroup with the attributes the driver reads; save() stores nothing."""

    def save(self):
        pass


def magnum_cluster(req, labels, template):
    """A magnum.objects.Cluster with the attributes the driver reads."""
    common = dict(
        image_id=IMAGE_ID,
        flavor_id="flavor-1",
        docker_volume_size=None,
        status="CREATE_COMPLETE",
        labels=dict(labels),
    )
    master = NodeGroup(
        name="default-master", role="master", node_count=1, **copy.deepcopy(common)
    )
    worker = NodeGroup(
        name="default-worker",
        role="worker",
        node_count=1,
        min_node_count=1,
        max_node_count=None,
        **copy.deepcopy(common),
    )
    return types.SimpleNamespace(
        uuid=req["uuid"],
        stack_id=req["stack_id"],
        status="CREATE_COMPLETE",
        labels=dict(labels),
        cluster_template=template,
        cluster_template_id=template.uuid,
        nodegroups=[master, worker],
        default_ng_master=master,
        default_ng_worker=worker,
        master_flavor_id="flavor-1",
        flavor_id="flavor-1",
        master_count=1,
        node_count=1,
        master_lb_enabled=False,
        project_id="project-1",
        user_id="user-1",
        keypair="key-1",
        fixed_network=None,
        fixed_subnet=None,
        floating_ip_enabled=True,
        docker_volume_size=None,
        name=req["stack_id"],
    )


def template_of(req, labels):
    """A magnum.objects.ClusterTemplate (the new one the cluster is upgraded to)."""
    return types.SimpleNamespace(
        uuid=str(uuidlib.uuid5(uuidlib.NAMESPACE_DNS, json.dumps(labels, sort_keys=True))),
        network_driver=req.get("network_driver", "calico"),
        labels=dict(labels),
        image_id=IMAGE_ID,
        external_network_id="5b7e2c1a-9f3d-4e8a-b6c0-1d2e3f4a5b6c",  # an ID: no Neutron lookup
        dns_nameserver="8.8.8.8",
        master_lb_enabled=False,
        floating_ip_enabled=True,
        tls_disabled=False,
        insecure_registry=None,
        http_proxy=None,
        https_proxy=None,
        no_proxy=None,
        fixed_network=None,
        fixed_subnet=None,
        volume_driver="cinder",
        docker_volume_size=None,
        cluster_distro="ubuntu",
        coe="kubernetes",
        server_type="vm",
    )


def occm_image(data):
    """The OCCM DaemonSet's image in the Secret data's cloud-controller-manager.yaml."""
    for doc in yaml.safe_load_all(data.get(OCCM_KEY, "")):
        if doc and doc.get("kind") == "DaemonSet":
            for c in doc["spec"]["template"]["spec"]["containers"]:
                if c["name"] == OCCM:
                    return c["image"]
    return None


def decoded(secret):
    return {k: base64.b64decode(v).decode() for k, v in (secret or {}).get("data", {}).items()}


def seed(store, req, workload_kubeconfig):
    """The management cluster as the driver left it when it created the cluster (the
    cloud-provider Secret is written by the driver itself, see main), and the
    `<stack_id>-kubeconfig` Secret Cluster API writes (the workload cluster is this apiserver)."""
    ns = f"/api/v1/namespaces/{NS}/secrets"
    store.put(
        f"{ns}/{req['stack_id']}-kubeconfig",
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": f"{req['stack_id']}-kubeconfig", "namespace": NS},
            "type": "cluster.x-k8s.io/secret",
            "stringData": {"value": workload_kubeconfig},
        },
    )
    store.put(
        f"/api/v1/namespaces/{NS}",
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}},
    )
    clouds = {
        "clouds": {
            "default": {
                "region_name": "RegionOne",
                "auth": {
                    "auth_url": "https://keystone.example:5000/v3",
                    "application_credential_id": "0123",
                    "application_credential_secret": "not-a-real-secret",
                },
            }
        }
    }
    store.put(
        f"{ns}/{req['stack_id']}-cloud-config",
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": f"{req['stack_id']}-cloud-config", "namespace": NS},
            "stringData": {"clouds.yaml": yaml.safe_dump(clouds), "cacert": ""},
        },
    )
    store.put(
        f"/apis/cluster.x-k8s.io/v1beta1/namespaces/{NS}/clusters/{req['stack_id']}",
        {
            "apiVersion": "cluster.x-k8s.io/v1beta1",
            "kind": "Cluster",
            "metadata": {
                "name": req["stack_id"],
                "namespace": NS,
                "labels": {"cluster-uuid": req["uuid"]},
            },
            "spec": {"topology": {"class": "magnum-v0.38.2", "version": req["labels"]["kube_tag"]}},
        },
    )


def kubeconfig(url, directory):
    path = os.path.join(directory, "kubeconfig")
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "management", "cluster": {"server": url}}],
        "users": [{"name": "magnum", "user": {"token": "fake"}}],
        "contexts": [
            {"name": "management", "context": {"cluster": "management", "user": "magnum"}}
        ],
        "current-context": "management",
    }
    with open(path, "w") as f:
        yaml.safe_dump(doc, f)
    return path


def run(req, store):
    """Writes the cloud-provider Secret with the driver for the cluster's labels before (as it did
    when it created the cluster), then upgrades the cluster. Returns the cluster, the Secret's data
    before, and the upgrade call's seconds."""
    from magnum.common import context as magnum_context
    from magnum_cluster_api import clients, driver, resources

    clients.get_openstack_api = FakeOpenStack
    context = magnum_context.RequestContext(is_admin=False)
    cluster = magnum_cluster(req, req["labels"], template_of(req, req["labels"]))
    d = driver.UbuntuDriver()
    resources.CloudProviderClusterResourcesSecret(
        context, d.kube_client, d.k8s_api, cluster
    ).apply()
    before = decoded(store.objects.get(secret_path(req)))
    store.requests.clear()
    new_template = template_of(req, req["template_labels"])
    t = time.monotonic()
    d.upgrade_cluster(context, cluster, new_template, 1, cluster.default_ng_worker)
    return cluster, before, time.monotonic() - t


def secret_path(req):
    return f"/api/v1/namespaces/{NS}/secrets/{req['stack_id']}-cloud-provider"


class Apiserver:
    """A real kube-apiserver, read and written with the request's token (not by the driver)."""

    def __init__(self, spec):
        import requests

        self.url = spec["url"]
        self.session = requests.Session()
        self.session.headers["Authorization"] = f"Bearer {spec['token']}"
        self.ca_file = spec["ca_file"]

    def get(self, path):
        r = self.session.get(self.url + path, verify=self.ca_file)
        if r.status_code == 404:
            return None
        r.raise_for_status()
        return r.json()

    def create(self, path, obj):
        r = self.session.post(self.url + path, json=obj, verify=self.ca_file)
        if r.status_code != 409:
            r.raise_for_status()


def create_real(req, api, workload_kubeconfig):
    """Creates the cluster in the real management cluster as the driver's create_cluster does
    (see the header for what it leaves out), with the labels before; returns the driver."""
    from magnum.common import context as magnum_context
    from magnum_cluster_api import clients, driver, resources

    clients.get_openstack_api = FakeOpenStack
    api.create(
        "/api/v1/namespaces",
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}},
    )
    # The workload cluster's kubeconfig Secret, as Cluster API's control plane writes it once
    # the cluster has an endpoint (none here: nothing provisions OpenStack).
    api.create(
        f"/api/v1/namespaces/{NS}/secrets",
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {
                "name": f"{req['stack_id']}-kubeconfig",
                "namespace": NS,
                "labels": {"cluster.x-k8s.io/cluster-name": req["stack_id"]},
            },
            "type": "cluster.x-k8s.io/secret",
            "stringData": {"value": workload_kubeconfig},
        },
    )
    context = magnum_context.RequestContext(is_admin=False)
    cluster = magnum_cluster(req, req["labels"], template_of(req, req["labels"]))
    d = driver.UbuntuDriver()
    osc = FakeOpenStack(context)
    d.rust_driver.create_cluster(cluster)
    credential = osc.create_application_credential(
        user_id=cluster.user_id, name=cluster.uuid, description=""
    )
    resources.CloudConfigSecret(
        context, d.kube_client, cluster, osc.cinder_region_name(), credential
    ).apply()
    resources.apply_cluster_from_magnum_cluster(
        context, d.kube_client, d.k8s_api, cluster, skip_auto_scaling_release=True
    )
    resources.Cluster(
        context, d.kube_client, d.k8s_api, cluster, rust_driver=d.rust_driver
    ).apply()
    return context, cluster, d


def main_real(req):
    spec = req["apiserver"]
    os.environ["KUBECONFIG"] = spec["kubeconfig"]
    api = Apiserver(spec)
    with open(spec["kubeconfig"]) as f:
        context, cluster, d = create_real(req, api, f.read())
    before = decoded(api.get(secret_path(req)))
    t = time.monotonic()
    d.upgrade_cluster(
        context, cluster, template_of(req, req["template_labels"]), 1, cluster.default_ng_worker
    )
    seconds = time.monotonic() - t
    after = decoded(api.get(secret_path(req)))
    capi = api.get(f"/apis/cluster.x-k8s.io/v1beta1/namespaces/{NS}/clusters/{req['stack_id']}")
    return cluster, before, after, [], capi, [], seconds


def main_imitated(req):
    store = Store()
    with tempfile.TemporaryDirectory(prefix="mcapi-upgrade-") as scratch:
        os.environ["KUBECONFIG"] = kubeconfig(serve(store), scratch)
        with open(os.environ["KUBECONFIG"]) as f:
            seed(store, req, f.read())
        cluster, before, seconds = run(req, store)
    after = decoded(store.objects.get(secret_path(req)))
    writes = [
        r for r in store.requests if r["path"] == secret_path(req) and r["method"] != "GET"
    ]
    capi = store.objects.get(
        f"/apis/cluster.x-k8s.io/v1beta1/namespaces/{NS}/clusters/{req['stack_id']}"
    )
    requests = [f"{r['method']} {r['path']}" for r in store.requests]
    return cluster, before, after, writes, capi, requests, seconds


def main():
    from importlib import metadata

    req = json.load(sys.stdin)
    real = req.get("apiserver")
    cluster, before, after, writes, capi, requests, seconds = (
        main_real(req) if real else main_imitated(req)
    )
    json.dump(
        {
            "version": metadata.version("magnum-cluster-api"),
            "labels_before": req["labels"],
            "labels_after": dict(cluster.labels),
            "image_before": occm_image(before),
            "image_after": occm_image(after),
            "data_before": before,
            "data_after": after,
            "keys_after": sorted(after),
            "secret_write": writes[-1] if writes else None,
            "topology_version": capi["spec"]["topology"]["version"],
            "requests": requests,
            "seconds": seconds,
        },
        sys.stdout,
    )


if __name__ == "__main__":
    main()
