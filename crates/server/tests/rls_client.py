"""A gRPC client of Envoy's rate limit service written with Python's grpcio, for the tests.

Generates its stubs from the server's own proto files with grpc_tools, then sends CALLS
ShouldRateLimit calls from CONCURRENCY threads and prints one JSON line per call, in the
order the calls were submitted:

    {"ok": true, "code": "OVER_LIMIT", "statuses": [...], "headers": {...}}
    {"ok": false, "error": "UNAVAILABLE", "details": "..."}

    python3 rls_client.py ADDR PROTO_DIR OUT_DIR CALLS CONCURRENCY DOMAIN HITS DESCRIPTOR...

Each DESCRIPTOR is `key=value,key=value` (entries, in order), optionally followed by
`@N` for its own hits_addend.
"""

import concurrent.futures
import importlib
import json
import os
import sys

import grpc
import grpc_tools
from grpc_tools import protoc


def stubs(proto_dir, out_dir):
    include = os.path.join(os.path.dirname(grpc_tools.__file__), "_proto")
    files = []
    for root, _, names in os.walk(proto_dir):
        files += [os.path.join(root, n) for n in names if n.endswith(".proto")]
    argv = ["protoc", f"-I{proto_dir}", f"-I{include}", f"--python_out={out_dir}",
            f"--grpc_python_out={out_dir}"] + files
    if protoc.main(argv) != 0:
        sys.exit("protoc failed")
    sys.path.insert(0, out_dir)
    pb = importlib.import_module("envoy.service.ratelimit.v3.rls_pb2")
    grpc_pb = importlib.import_module("envoy.service.ratelimit.v3.rls_pb2_grpc")
    common = importlib.import_module("envoy.extensions.common.ratelimit.v3.ratelimit_pb2")
    return pb, grpc_pb, common


def descriptor(common, text):
    hits = None
    if "@" in text:
        text, hits = text.rsplit("@", 1)
    d = common.RateLimitDescriptor()
    for pair in text.split(","):
        key, value = pair.split("=", 1)
        d.entries.add(key=key, value=value)
    if hits is not None:
        d.hits_addend.value = int(hits)
    return d


def main():
    addr, proto_dir, out_dir, calls, concurrency, domain, hits = sys.argv[1:8]
    pb, grpc_pb, common = stubs(proto_dir, out_dir)
    request = pb.RateLimitRequest(
        domain=domain,
        descriptors=[descriptor(common, d) for d in sys.argv[8:]],
        hits_addend=int(hits),
    )
    code_name = pb.RateLimitResponse.Code.Name
    channel = grpc.insecure_channel(addr)
    stub = grpc_pb.RateLimitServiceStub(channel)

    def call(_):
        try:
            r = stub.ShouldRateLimit(request, timeout=10)
        except grpc.RpcError as e:
            return {"ok": False, "error": e.code().name, "details": e.details()}
        return {
            "ok": True,
            "code": code_name(r.overall_code),
            "statuses": [
                {
                    "code": code_name(s.code),
                    "remaining": s.limit_remaining,
                    "limit": None if not s.HasField("current_limit") else {
                        "name": s.current_limit.name,
                        "requests_per_unit": s.current_limit.requests_per_unit,
                        "unit": pb.RateLimitResponse.RateLimit.Unit.Name(s.current_limit.unit),
                    },
                    "reset_ns": None if not s.HasField("duration_until_reset") else
                    s.duration_until_reset.seconds * 10**9 + s.duration_until_reset.nanos,
                }
                for s in r.statuses
            ],
            "headers": {h.key: h.value for h in r.response_headers_to_add},
        }

    with concurrent.futures.ThreadPoolExecutor(max_workers=int(concurrency)) as pool:
        for result in pool.map(call, range(int(calls))):
            print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
