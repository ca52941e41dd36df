"""The apiserver's floor for the controller benchmarks: the same writes the controller made, of
the same size, sent from as many clients as the controller uses, over kept-alive connections,
and nothing else (no reads, no decisions). bench/controller.sh and bench/grants.sh run it with the
controller stopped and print its time beside the controller's.

  python3 floor.py copy CLUSTER_DIR CLIENTS OBJECTS.json NAMESPACE
      OBJECTS.json (`kubectl get -o json` of McpServers and ConfigMaps the controller wrote):
      each McpServer's status is written to the McpServer of the same name in NAMESPACE (created
      beforehand, without status), each ConfigMap is created there: the controller's writes
      for a server read for the first time.
  python3 floor.py rewrite CLUSTER_DIR CLIENTS OBJECTS.json
      each object (AgentSpecs and ConfigMaps) is written again in place with one character of
      its data changed (same size, so a real write): the controller's writes for a change of
      every AgentSpec's grants. The controller must be stopped.

Every write is one server-side apply (application/apply-patch+yaml, fieldManager=mcp-operator,
force), as the controller writes. Prints one line: writes, clients, seconds, and failures (which
must be 0 for the figure to mean anything). Standard library only.
"""

import json
import ssl
import sys
import threading
import time
import http.client


def path_of(obj, namespace):
    kind, name = obj["kind"], obj["metadata"]["name"]
    if kind == "ConfigMap":
        return f"/api/v1/namespaces/{namespace}/configmaps/{name}"
    plural = {"McpServer": "mcpservers", "AgentSpec": "agentspecs"}[kind]
    return f"/apis/{obj['apiVersion']}/namespaces/{namespace}/{plural}/{name}/status"


def body_of(obj, namespace):
    meta = {"name": obj["metadata"]["name"], "namespace": namespace}
    for key in ("labels", "annotations"):
        if obj["metadata"].get(key):
            meta[key] = obj["metadata"][key]
    body = {"apiVersion": obj["apiVersion"], "kind": obj["kind"], "metadata": meta}
    for key in ("status", "data", "binaryData"):
        if key in obj:
            body[key] = obj[key]
    return body


def changed(text):
    """The same text with its last character changed: a write of the same size."""
    return text[:-1] + ("a" if text[-1:] != "a" else "b")


def rewritten(body):
    if "data" in body and body["data"]:
        key = sorted(body["data"])[0]
        body["data"][key] = changed(body["data"][key])
    elif "status" in body and body["status"].get("grantsDigest"):
        body["status"]["grantsDigest"] = changed(body["status"]["grantsDigest"])
    return body


def writes_of(mode, objects, namespace):
    writes = []
    for obj in objects:
        ns = namespace if mode == "copy" else obj["metadata"]["namespace"]
        body = body_of(obj, ns)
        if mode == "rewrite":
            body = rewritten(body)
        writes.append((path_of(obj, ns), json.dumps(body).encode()))
    return writes


def main():
    mode, cluster, clients, objects_file = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    namespace = sys.argv[5] if mode == "copy" else None
    env = dict(
        line.strip().split("=", 1)
        for line in open(f"{cluster}/env")
        if "=" in line
    )
    host, port = env["E2E_APISERVER_URL"].removeprefix("https://").split(":")
    tls = ssl.create_default_context(cafile=f"{cluster}/pki/ca.crt")
    tls.load_cert_chain(f"{cluster}/pki/admin.crt", f"{cluster}/pki/admin.key")
    writes = writes_of(mode, json.load(open(objects_file))["items"], namespace)
    lock = threading.Lock()
    failures = []
    queue = list(reversed(writes))

    def client():
        conn = http.client.HTTPSConnection(host, int(port), context=tls, timeout=60)
        while True:
            with lock:
                if not queue:
                    break
                path, body = queue.pop()
            conn.request(
                "PATCH",
                f"{path}?fieldManager=mcp-operator&force=true",
                body=body,
                headers={"Content-Type": "application/apply-patch+yaml"},
            )
            response = conn.getresponse()
            answer = response.read()
            if response.status >= 300:
                with lock:
                    failures.append(f"{response.status} {path}: {answer[:200]!r}")
        conn.close()

    threads = [threading.Thread(target=client) for _ in range(clients)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    seconds = time.monotonic() - t0
    size = sum(len(b) for _, b in writes)
    print(
        f"{len(writes)} writes ({size / max(len(writes), 1) / 1024:.1f} KiB each on average) "
        f"from {clients} clients: {seconds:.2f} s, {len(failures)} failed"
    )
    for f in failures[:3]:
        print("  " + f, file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
