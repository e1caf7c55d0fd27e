"""A FAKE of Google Cloud DNS's REST API (v1), for Meridian's Google provider tests.

Google publishes no Cloud DNS emulator, so this fake serves the subset the provider uses, on
loopback, and is strict about what it is sent:

  GET  /dns/v1/projects/{project}/managedZones                    (dnsName, pageToken)
  GET  /dns/v1/projects/{project}/managedZones/{zone}/rrsets      (name, type, maxResults, pageToken)
  POST /dns/v1/projects/{project}/managedZones/{zone}/changes

A change is checked field by field (unknown fields, names outside the zone, malformed values,
routing policies, the default per-change quotas), deletions must equal the current record set
exactly, additions must not exist after the deletions, and a CNAME stays alone at its name. A
change is applied whole or not at all. Errors use Cloud DNS's JSON error shape and codes.

Test helpers, not part of Cloud DNS:
  GET  /_fake/requests        counts of requests answered, by method ("list-zones", ...)
  --throttle-every N          answers every Nth API request with 429 rateLimitExceeded
  --zone NAME=DNS_NAME        creates a zone (with SOA and NS records) at start
  --metadata-token TOKEN      also plays a GKE metadata server (GET
                              /computeMetadata/v1/instance/service-accounts/default/token with
                              Metadata-Flavor: Google) handing out TOKEN, and answers 401 to API
                              requests without "Authorization: Bearer TOKEN"

Prints "listening on <port>" once it accepts connections.
"""

import argparse
import ipaddress
import json
import re
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

# Cloud DNS's default per-project quotas (`gcloud dns project-info describe`).
RRSET_ADDITIONS_PER_CHANGE = 100
RRSET_DELETIONS_PER_CHANGE = 100
RRDATAS_PER_RRSET = 100
TOTAL_RRDATA_SIZE_PER_CHANGE = 10000

# Region names Cloud DNS accepts as GEO locations (the Google Cloud regions).
REGIONS = {
    "africa-south1", "asia-east1", "asia-east2", "asia-northeast1", "asia-northeast2",
    "asia-northeast3", "asia-south1", "asia-south2", "asia-southeast1", "asia-southeast2",
    "australia-southeast1", "australia-southeast2", "europe-central2", "europe-north1",
    "europe-north2", "europe-southwest1", "europe-west1", "europe-west2", "europe-west3",
    "europe-west4", "europe-west6", "europe-west8", "europe-west9", "europe-west10",
    "europe-west12", "me-central1", "me-central2", "me-west1", "northamerica-northeast1",
    "northamerica-northeast2", "northamerica-south1", "southamerica-east1",
    "southamerica-west1", "us-central1", "us-east1", "us-east4", "us-east5", "us-south1",
    "us-west1", "us-west2", "us-west3", "us-west4",
}

TYPES = {"A", "AAAA", "CNAME", "TXT", "NS", "SOA", "MX", "SRV", "CAA"}
RRSET_FIELDS = {"kind", "name", "type", "ttl", "rrdatas", "routingPolicy"}
LABEL = re.compile(r"^(\*|[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?)$")
TXT_STRINGS = re.compile(r'^("([^"\\]|\\.){0,255}"\s*)+$')


class ApiError(Exception):
    def __init__(self, status, reason, message):
        super().__init__(message)
        self.status = status
        self.reason = reason
        self.message = message


def invalid(message):
    return ApiError(400, "invalid", message)


class Zone:
    def __init__(self, name, dns_name):
        self.name = name
        self.dns_name = dns_name
        self.rrsets = {}  # (name, type) -> rrset dict, in Cloud DNS's canonical form
        self.changes = 0
        self.rrsets[(dns_name, "SOA")] = {
            "name": dns_name, "type": "SOA", "ttl": 21600,
            "rrdatas": ["ns-cloud-a1.googledomains.com. cloud-dns-hostmaster.google.com. 1 21600 3600 259200 300"],
        }
        self.rrsets[(dns_name, "NS")] = {
            "name": dns_name, "type": "NS", "ttl": 21600,
            "rrdatas": [f"ns-cloud-a{i}.googledomains.com." for i in range(1, 5)],
        }

    def resource(self, project):
        return {
            "kind": "dns#managedZone", "name": self.name, "dnsName": self.dns_name,
            "id": str(abs(hash(self.name)) % 10**12), "visibility": "public",
            "nameServers": [f"ns-cloud-a{i}.googledomains.com." for i in range(1, 5)],
            "description": f"fake zone of {project}",
        }


def check_rdata(rtype, rdata, where):
    if not isinstance(rdata, str) or not rdata:
        raise invalid(f"{where}: an rrdata must be a non-empty string")
    if rtype == "A":
        try:
            ipaddress.IPv4Address(rdata)
        except ValueError:
            raise invalid(f"{where}: {rdata!r} is not an IPv4 address")
    elif rtype == "AAAA":
        try:
            ipaddress.IPv6Address(rdata)
        except ValueError:
            raise invalid(f"{where}: {rdata!r} is not an IPv6 address")
    elif rtype in ("CNAME", "NS"):
        if not rdata.endswith("."):
            raise invalid(f"{where}: {rdata!r} must be a fully qualified name ending in '.'")
    elif rtype == "TXT":
        if not TXT_STRINGS.match(rdata):
            raise invalid(f"{where}: {rdata!r} must be quoted strings of at most 255 characters")
    return len(rdata)


def check_rrdatas(rtype, rrdatas, where):
    if not isinstance(rrdatas, list) or not rrdatas:
        raise invalid(f"{where}.rrdatas: at least one value is required")
    if len(rrdatas) > RRDATAS_PER_RRSET:
        raise ApiError(403, "quotaExceeded", f"{where}: more than {RRDATAS_PER_RRSET} rrdatas")
    if len(set(rrdatas)) != len(rrdatas):
        raise invalid(f"{where}.rrdatas: duplicate values")
    if rtype == "CNAME" and len(rrdatas) != 1:
        raise invalid(f"{where}: a CNAME has exactly one value")
    return sum(check_rdata(rtype, r, f"{where}.rrdatas") for r in rrdatas)


def check_item(item, allowed, where):
    unknown = set(item) - allowed
    if unknown:
        raise invalid(f"{where}: unknown fields {sorted(unknown)}")


def check_routing_policy(rtype, policy, where):
    if not isinstance(policy, dict):
        raise invalid(f"{where}: must be an object")
    check_item(policy, {"kind", "wrr", "geo"}, where)
    if ("wrr" in policy) == ("geo" in policy):
        raise invalid(f"{where}: exactly one of wrr and geo is required")
    size = 0
    if "wrr" in policy:
        check_item(policy["wrr"], {"kind", "items"}, f"{where}.wrr")
        items = policy["wrr"].get("items") or []
        if not items:
            raise invalid(f"{where}.wrr.items: at least one item is required")
        for i, item in enumerate(items):
            check_item(item, {"kind", "weight", "rrdatas"}, f"{where}.wrr.items[{i}]")
            weight = item.get("weight")
            if not isinstance(weight, (int, float)) or isinstance(weight, bool) or weight < 0:
                raise invalid(f"{where}.wrr.items[{i}].weight: must be a non-negative number")
            size += check_rrdatas(rtype, item.get("rrdatas"), f"{where}.wrr.items[{i}]")
    else:
        check_item(policy["geo"], {"kind", "items", "enableFencing"}, f"{where}.geo")
        items = policy["geo"].get("items") or []
        if not items:
            raise invalid(f"{where}.geo.items: at least one item is required")
        locations = [item.get("location") for item in items]
        for i, item in enumerate(items):
            check_item(item, {"kind", "location", "rrdatas"}, f"{where}.geo.items[{i}]")
            if item.get("location") not in REGIONS:
                raise invalid(f"{where}.geo.items[{i}].location: {item.get('location')!r} is not a region")
            size += check_rrdatas(rtype, item.get("rrdatas"), f"{where}.geo.items[{i}]")
        if len(set(locations)) != len(locations):
            raise invalid(f"{where}.geo.items: a location appears twice")
    return size


def canonical_rrset(zone, rrset, where):
    """Checks one rrset of a change and returns it without its optional kinds."""
    if not isinstance(rrset, dict):
        raise invalid(f"{where}: must be an object")
    unknown = set(rrset) - RRSET_FIELDS
    if unknown:
        raise invalid(f"{where}: unknown fields {sorted(unknown)}")
    name, rtype, ttl = rrset.get("name"), rrset.get("type"), rrset.get("ttl")
    if not isinstance(name, str) or not name.endswith("."):
        raise invalid(f"{where}.name: {name!r} must be a fully qualified name ending in '.'")
    if name != zone.dns_name and not name.endswith("." + zone.dns_name):
        raise invalid(f"{where}.name: {name!r} is not in zone {zone.dns_name!r}")
    if any(not LABEL.match(label) for label in name[:-1].split(".")) or len(name) > 254:
        raise invalid(f"{where}.name: {name!r} is not a valid DNS name")
    if "*" in name[:-1].split(".")[1:]:
        raise invalid(f"{where}.name: '*' is only allowed as the first label")
    if rtype not in TYPES:
        raise invalid(f"{where}.type: {rtype!r} is not a supported type")
    if not isinstance(ttl, int) or isinstance(ttl, bool) or ttl < 0:
        raise invalid(f"{where}.ttl: must be a non-negative integer")
    has_rrdatas = bool(rrset.get("rrdatas"))
    has_policy = "routingPolicy" in rrset
    if has_rrdatas == has_policy:
        raise invalid(f"{where}: exactly one of rrdatas and routingPolicy is required")
    canonical = {"name": name, "type": rtype, "ttl": ttl}
    if has_policy:
        size = check_routing_policy(rtype, rrset["routingPolicy"], f"{where}.routingPolicy")
        canonical["routingPolicy"] = strip_kinds(rrset["routingPolicy"])
    else:
        size = check_rrdatas(rtype, rrset["rrdatas"], where)
        canonical["rrdatas"] = list(rrset["rrdatas"])
    return canonical, size


def strip_kinds(value):
    if isinstance(value, dict):
        return {k: strip_kinds(v) for k, v in value.items() if k != "kind"}
    if isinstance(value, list):
        return [strip_kinds(v) for v in value]
    return value


def with_kinds(rrset):
    out = dict(rrset, kind="dns#resourceRecordSet")
    return out


class Fake:
    def __init__(self, project, page_size, throttle_every, metadata_token=None):
        self.project = project
        # When set, the fake also plays a GKE metadata server handing out this token, and the
        # API refuses (401) any request not bearing it.
        self.metadata_token = metadata_token
        self.page_size = page_size
        self.throttle_every = throttle_every
        self.zones = {}
        self.lock = threading.Lock()
        self.requests = {}
        self.api_requests = 0

    def count(self, method):
        self.requests[method] = self.requests.get(method, 0) + 1

    def zone(self, project, name):
        if project != self.project:
            raise ApiError(403, "forbidden", f"project {project!r} is not {self.project!r}")
        zone = self.zones.get(name)
        if zone is None:
            raise ApiError(404, "notFound", f"The 'parameters.managedZone' resource named '{name}' does not exist.")
        return zone

    def page(self, items, query, key):
        limit = min(int(query.get("maxResults", [self.page_size])[0]), self.page_size)
        start = int(query.get("pageToken", ["0"])[0] or 0)
        body = {key: items[start:start + limit]}
        if start + limit < len(items):
            body["nextPageToken"] = str(start + limit)
        return body

    def list_zones(self, project, query):
        if project != self.project:
            raise ApiError(403, "forbidden", f"project {project!r} is not {self.project!r}")
        zones = sorted(self.zones.values(), key=lambda z: z.name)
        if "dnsName" in query:
            zones = [z for z in zones if z.dns_name == query["dnsName"][0]]
        body = self.page([z.resource(project) for z in zones], query, "managedZones")
        body["kind"] = "dns#managedZonesListResponse"
        return body

    def list_rrsets(self, zone, query):
        rrsets = [with_kinds(r) for _, r in sorted(zone.rrsets.items())]
        if "name" in query:
            rrsets = [r for r in rrsets if r["name"] == query["name"][0]]
        if "type" in query:
            if "name" not in query:
                raise invalid("type is only allowed together with name")
            rrsets = [r for r in rrsets if r["type"] == query["type"][0]]
        body = self.page(rrsets, query, "rrsets")
        body["kind"] = "dns#resourceRecordSetsListResponse"
        return body

    def create_change(self, zone, body):
        if not isinstance(body, dict):
            raise invalid("the change must be an object")
        unknown = set(body) - {"kind", "additions", "deletions"}
        if unknown:
            raise invalid(f"change: unknown fields {sorted(unknown)}")
        additions = body.get("additions") or []
        deletions = body.get("deletions") or []
        if not additions and not deletions:
            raise invalid("change: the change is empty")
        if len(additions) > RRSET_ADDITIONS_PER_CHANGE:
            raise ApiError(403, "quotaExceeded", f"more than {RRSET_ADDITIONS_PER_CHANGE} additions in one change")
        if len(deletions) > RRSET_DELETIONS_PER_CHANGE:
            raise ApiError(403, "quotaExceeded", f"more than {RRSET_DELETIONS_PER_CHANGE} deletions in one change")
        size = 0
        checked_deletions = []
        for i, rrset in enumerate(deletions):
            canonical, rrset_size = canonical_rrset(zone, rrset, f"entity.change.deletions[{i}]")
            checked_deletions.append(canonical)
            size += rrset_size
        checked_additions = []
        for i, rrset in enumerate(additions):
            canonical, rrset_size = canonical_rrset(zone, rrset, f"entity.change.additions[{i}]")
            checked_additions.append(canonical)
            size += rrset_size
        if size > TOTAL_RRDATA_SIZE_PER_CHANGE:
            raise ApiError(403, "quotaExceeded", f"{size} bytes of rrdata exceed {TOTAL_RRDATA_SIZE_PER_CHANGE} in one change")
        after = dict(zone.rrsets)
        for i, rrset in enumerate(checked_deletions):
            key = (rrset["name"], rrset["type"])
            current = after.get(key)
            if current is None:
                raise ApiError(404, "notFound", f"The 'entity.change.deletions[{i}]' resource named '{key[0]} ({key[1]})' does not exist.")
            if current != rrset:
                raise ApiError(412, "conditionNotMet", f"Precondition not met for 'entity.change.deletions[{i}]'")
            del after[key]
        for i, rrset in enumerate(checked_additions):
            key = (rrset["name"], rrset["type"])
            if key in after:
                raise ApiError(409, "alreadyExists", f"The resource 'entity.change.additions[{i}]' named '{key[0]} ({key[1]})' already exists")
            after[key] = rrset
        names = {}
        for name, rtype in after:
            names.setdefault(name, set()).add(rtype)
        for name, types in names.items():
            if "CNAME" in types and len(types) > 1:
                raise ApiError(400, "cnameResourceRecordSetConflict", f"The resource record set 'entity.change.additions' named '{name}' (CNAME) conflicts with other records at that name")
        zone.rrsets = after
        zone.changes += 1
        return {
            "kind": "dns#change", "id": str(zone.changes), "status": "done",
            "startTime": "2026-01-01T00:00:00.000Z",
            "additions": [with_kinds(r) for r in checked_additions],
            "deletions": [with_kinds(r) for r in checked_deletions],
        }


ZONES = re.compile(r"^/dns/v1/projects/([^/]+)/managedZones$")
RRSETS = re.compile(r"^/dns/v1/projects/([^/]+)/managedZones/([^/]+)/rrsets$")
CHANGES = re.compile(r"^/dns/v1/projects/([^/]+)/managedZones/([^/]+)/changes$")


class Handler(BaseHTTPRequestHandler):
    fake = None
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def reply(self, status, body):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=UTF-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def error(self, error):
        status_names = {400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED", 404: "NOT_FOUND",
                        409: "ALREADY_EXISTS", 412: "FAILED_PRECONDITION", 429: "RESOURCE_EXHAUSTED"}
        self.reply(error.status, {"error": {
            "code": error.status, "message": error.message,
            "status": status_names.get(error.status, "UNKNOWN"),
            "errors": [{"domain": "global", "reason": error.reason, "message": error.message}],
        }})

    def handle_api(self, method):
        fake = self.fake
        url = urlparse(self.path)
        query = parse_qs(url.query)
        if url.path == "/_fake/requests" and method == "GET":
            with fake.lock:
                return self.reply(200, dict(fake.requests))
        if fake.metadata_token and url.path.startswith("/computeMetadata/"):
            # The metadata server: the token of the workload's service account, to callers
            # that say they mean the metadata server (as GKE's refuses others).
            if self.headers.get("Metadata-Flavor") != "Google":
                raise ApiError(403, "forbidden", "Metadata-Flavor: Google is missing")
            if method == "GET" and url.path == "/computeMetadata/v1/instance/service-accounts/default/token":
                with fake.lock:
                    fake.count("metadata-token")
                return self.reply(200, {"access_token": fake.metadata_token,
                                        "expires_in": 3599, "token_type": "Bearer"})
            raise ApiError(404, "notFound", f"{url.path} is not part of this metadata server")
        if fake.metadata_token and self.headers.get("Authorization") != f"Bearer {fake.metadata_token}":
            with fake.lock:
                fake.count("unauthenticated")
            raise ApiError(401, "authError", "Request had invalid authentication credentials.")
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        with fake.lock:
            fake.api_requests += 1
            if fake.throttle_every and fake.api_requests % fake.throttle_every == 0:
                fake.count("throttled")
                raise ApiError(429, "rateLimitExceeded", "Rate Limit Exceeded")
            if method == "GET" and (m := ZONES.match(url.path)):
                fake.count("list-zones")
                return self.reply(200, fake.list_zones(m.group(1), query))
            if method == "GET" and (m := RRSETS.match(url.path)):
                fake.count("list-rrsets")
                return self.reply(200, fake.list_rrsets(fake.zone(m.group(1), m.group(2)), query))
            if method == "POST" and (m := CHANGES.match(url.path)):
                fake.count("create-change")
                if self.headers.get("Content-Type", "").split(";")[0] != "application/json":
                    raise invalid("the body must be application/json")
                try:
                    body = json.loads(raw or b"null")
                except ValueError:
                    raise invalid("the body is not JSON")
                zone = fake.zone(m.group(1), m.group(2))
                try:
                    return self.reply(200, fake.create_change(zone, body))
                except ApiError:
                    fake.count("create-change-refused")
                    raise
            raise ApiError(404, "notFound", f"{method} {url.path} is not part of this fake")

    def dispatch(self, method):
        try:
            self.handle_api(method)
        except ApiError as error:
            self.error(error)

    def do_GET(self):
        self.dispatch("GET")

    def do_POST(self):
        self.dispatch("POST")

    def do_PUT(self):
        self.dispatch("PUT")

    def do_PATCH(self):
        self.dispatch("PATCH")

    def do_DELETE(self):
        self.dispatch("DELETE")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--project", default="meridian-test")
    parser.add_argument("--page-size", type=int, default=100)
    parser.add_argument("--throttle-every", type=int, default=0)
    parser.add_argument("--metadata-token", default=None,
                        help="also serve a metadata server handing out this token, and require it")
    parser.add_argument("--zone", action="append", default=[], metavar="NAME=DNS_NAME")
    args = parser.parse_args()
    fake = Fake(args.project, args.page_size, args.throttle_every, args.metadata_token)
    for spec in args.zone:
        name, dns_name = spec.split("=", 1)
        fake.zones[name] = Zone(name, dns_name if dns_name.endswith(".") else dns_name + ".")
    Handler.fake = fake
    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    print(f"listening on {server.server_address[1]}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    sys.exit(main())
