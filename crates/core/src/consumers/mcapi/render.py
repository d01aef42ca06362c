# occm-forge's driver of magnum-cluster-api's compiled renderer (run as `python -c`, see
# crates/core/src/consumers/mcapi/renderer.rs). It needs only `pip install --no-deps magnum-cluster-api` and `helm` on
# PATH: the compiled module renders the OCCM chart it carries with `helm template`.
#
# With the argument `--version`: prints the installed magnum-cluster-api version.
# Otherwise: reads a JSON list of clusters from stdin, each
#   {"uuid", "stack_id", "status", "network_driver", "labels": {name: value}}
# and prints a JSON list, per cluster, of the `<stack_id>-cloud-provider` Secret's data that
# `Driver.get_cloud_provider_cluster_resource_secret_data(cluster)` returns ({key: text}), or
# {"error": "<one line>"} when it raises.
import json
import sys
import types

if sys.argv[1:] == ["--version"]:
    from importlib import metadata

    print(metadata.version("magnum-cluster-api"))
    sys.exit(0)

# The compiled module alone: magnum_cluster_api/__init__.py imports nothing, so no Magnum or
# OpenStack package is needed.
from magnum_cluster_api import magnum_cluster_api as mcapi

out = []
for c in json.load(sys.stdin):
    # Plain objects stand in for magnum.objects.Cluster and its ClusterTemplate: the compiled
    # code reads these attributes and `labels` as a dict of strings.
    cluster = types.SimpleNamespace(
        uuid=c["uuid"],
        stack_id=c["stack_id"],
        status=c["status"],
        labels={k: str(v) for k, v in c["labels"].items()},
        cluster_template=types.SimpleNamespace(network_driver=c["network_driver"]),
    )
    try:
        data = mcapi.Driver.get_cloud_provider_cluster_resource_secret_data(cluster)
        out.append({"data": dict(data or {})})
    except Exception as e:  # noqa: BLE001 - reported per cluster, as one line
        out.append({"error": " ".join(f"{type(e).__name__}: {e}".split())})
json.dump(out, sys.stdout)
