"""A FAKE of the Azure REST APIs Meridian's Azure provider uses, for its tests and benchmark.

Azure publishes no emulator for Azure DNS or Traffic Manager, so this fake serves the subset
the provider calls, over HTTPS on loopback, and is strict about what it is sent:

  POST   /{tenant}/oauth2/v2.0/token                  Entra ID client-credentials grant (secret
                                                      or federated workload identity token)
  GET    {group}/providers/Microsoft.Network/dnsZones                              2018-05-01
  GET    {group}/providers/Microsoft.Network/dnsZones/{zone}/recordsets            2018-05-01
  GET|PUT|DELETE {group}/providers/Microsoft.Network/dnsZones/{zone}/{type}/{name} 2018-05-01
  GET    {group}/providers/Microsoft.Network/trafficmanagerprofiles                2022-04-01
  GET|PUT|DELETE {group}/providers/Microsoft.Network/trafficmanagerprofiles/{name} 2022-04-01

where {group} is /subscriptions/{subscription}/resourceGroups/{resourceGroup}.

Checked, as Azure documents them: the bearer token (issued by the token endpoint for the one
client ID and secret), the api-version of each API, the resource group, request bodies field
by field (unknown fields, the record list of the record set's type only, TTLs, addresses, TXT
strings of at most 255 characters, 20 records per set, CNAME alone at its name and not at the
apex, alias targets that exist), ETags (If-Match, If-None-Match: *, 412 on a mismatch), Traffic
Manager profiles (routing methods, endpoint types, weights 1-1000, every geographic code on
one endpoint only, nested targets that exist, globally unique relative names), quotas (record
sets per zone, profiles per subscription, endpoints per profile), and throttling (429 with
Retry-After). Errors use ARM's {"error": {"code", "message"}} body.

Test helpers, not part of Azure, on a second, plain-HTTP port:
  GET  /_fake/requests        counts of API requests answered, by operation
  GET  /_fake/state           every record set and profile as stored
  POST /_fake/throttle?n=N    answer the next N API requests with 429 and Retry-After: 1

Prints "listening on <https port> <admin port>" once it accepts connections.
"""

import argparse
import ipaddress
import json
import re
import ssl
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

DNS_API = "2018-05-01"
TM_API = "2022-04-01"
RECORDS_PER_SET = 20
TYPE_FIELDS = {
    "A": "ARecords", "AAAA": "AAAARecords", "CNAME": "CNAMERecord", "TXT": "TXTRecords",
    "NS": "NSRecords", "MX": "MXRecords", "SRV": "SRVRecords", "CAA": "caaRecords",
    "PTR": "PTRRecords", "SOA": "SOARecord",
}
ALIAS_TYPES = {"A", "AAAA", "CNAME"}
RECORD_SET_PROPERTIES = {"TTL", "metadata", "targetResource", *TYPE_FIELDS.values()}
PROFILE_PROPERTIES = {
    "profileStatus", "trafficRoutingMethod", "dnsConfig", "monitorConfig", "endpoints",
    "trafficViewEnrollmentStatus", "allowedEndpointRecordTypes", "maxReturn",
}
ENDPOINT_PROPERTIES = {
    "target", "targetResourceId", "endpointStatus", "weight", "priority", "endpointLocation",
    "geoMapping", "minChildEndpoints", "minChildEndpointsIPv4", "minChildEndpointsIPv6",
    "subnets", "customHeaders", "alwaysServe",
}
ROUTING_METHODS = {"Performance", "Priority", "Weighted", "Geographic", "MultiValue", "Subnet"}
ENDPOINT_TYPES = {
    "microsoft.network/trafficmanagerprofiles/externalendpoints": "ExternalEndpoints",
    "microsoft.network/trafficmanagerprofiles/nestedendpoints": "NestedEndpoints",
    "microsoft.network/trafficmanagerprofiles/azureendpoints": "AzureEndpoints",
}
# Traffic Manager's geographic hierarchy: WORLD, its regional groupings, and countries (ISO
# 3166-1 alpha-2, checked by shape) with optional states (XX-YY).
GEO_REGIONS = {"WORLD", "GEO-AF", "GEO-AN", "GEO-AS", "GEO-AP", "GEO-EU", "GEO-ME", "GEO-NA", "GEO-SA"}
GEO_CODE = re.compile(r"^[A-Z]{2}(-[A-Z0-9]{1,3})?$")
LABEL = re.compile(r"^(\*|@|[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?)$")
PROFILE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9.-]{0,62}$")
RELATIVE_NAME = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")


class ApiError(Exception):
    def __init__(self, status, code, message, headers=None):
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.headers = headers or {}


def bad(message, code="BadRequest"):
    return ApiError(400, code, message)


def check_fields(obj, allowed, where):
    if not isinstance(obj, dict):
        raise bad(f"{where} must be an object", "InvalidRequestContent")
    unknown = set(obj) - allowed
    if unknown:
        raise bad(f"{where}: unknown fields {sorted(unknown)}", "InvalidRequestContent")


class Store:
    def __init__(self, args):
        self.args = args
        self.lock = threading.Lock()
        self.zones = {}  # zone -> {(name, type): record set}
        self.profiles = {}  # lower name -> profile
        self.tokens = set()
        self.requests = {}
        self.throttle = 0
        for zone in args.zone:
            self.zones[zone] = {
                ("@", "SOA"): self.stored_set(zone, "@", "SOA", {"TTL": 3600, "SOARecord": {
                    "host": "ns1-01.azure-dns.com.", "email": "azuredns-hostmaster.microsoft.com",
                    "serialNumber": 1, "refreshTime": 3600, "retryTime": 300,
                    "expireTime": 2419200, "minimumTTL": 300}}),
                ("@", "NS"): self.stored_set(zone, "@", "NS", {"TTL": 172800, "NSRecords": [
                    {"nsdname": f"ns{i}-01.azure-dns.{tld}."}
                    for i, tld in enumerate(["com", "net", "org", "info"], 1)]}),
            }

    def group(self):
        return f"/subscriptions/{self.args.subscription}/resourceGroups/{self.args.resource_group}"

    def stored_set(self, zone, name, rtype, properties):
        fqdn = f"{zone}." if name == "@" else f"{name}.{zone}."
        return {
            "id": f"{self.group()}/providers/Microsoft.Network/dnszones/{zone}/{rtype}/{name}",
            "name": name, "type": f"Microsoft.Network/dnszones/{rtype}",
            "etag": str(uuid.uuid4()),
            "properties": {**properties, "fqdn": fqdn, "provisioningState": "Succeeded"},
        }

    def count(self, operation):
        self.requests[operation] = self.requests.get(operation, 0) + 1

    def profile_id(self, name):
        return f"{self.group()}/providers/Microsoft.Network/trafficManagerProfiles/{name}"

    def profile_by_id(self, resource_id):
        prefix = f"{self.group()}/providers/Microsoft.Network/trafficManagerProfiles/".lower()
        if not isinstance(resource_id, str) or not resource_id.lower().startswith(prefix):
            return None
        return self.profiles.get(resource_id[len(prefix):].lower())

    # --- Azure DNS -----------------------------------------------------------------------

    def check_record_set(self, zone, name, rtype, body):
        check_fields(body, {"id", "name", "type", "etag", "properties"}, "the record set")
        props = body.get("properties")
        check_fields(props, RECORD_SET_PROPERTIES, "properties")
        ttl = props.get("TTL")
        if not isinstance(ttl, int) or isinstance(ttl, bool) or not 0 <= ttl <= 2147483647:
            raise bad("properties.TTL must be an integer from 0 to 2147483647")
        for field in TYPE_FIELDS.values():
            if field in props and field != TYPE_FIELDS[rtype]:
                raise bad(f"properties.{field} is not valid for a record set of type {rtype}")
        records = props.get(TYPE_FIELDS[rtype])
        alias = props.get("targetResource")
        if alias is not None:
            if rtype not in ALIAS_TYPES:
                raise bad(f"an alias record set must be A, AAAA or CNAME, not {rtype}")
            check_fields(alias, {"id"}, "properties.targetResource")
            if records:
                raise bad("a record set has either targetResource or records, not both")
            if self.profile_by_id(alias.get("id")) is None:
                raise bad(f"target resource {alias.get('id')!r} does not exist",
                          "InvalidTargetResource")
            return
        if rtype == "CNAME":
            if name == "@":
                raise bad("a CNAME record set cannot be at the zone apex")
            check_fields(records, {"cname"}, "properties.CNAMERecord")
            if not isinstance(records.get("cname"), str) or not records["cname"]:
                raise bad("properties.CNAMERecord.cname is required")
            return
        if not isinstance(records, list) or not records:
            raise bad(f"properties.{TYPE_FIELDS[rtype]} needs at least one record")
        if len(records) > RECORDS_PER_SET:
            raise bad(f"a record set holds at most {RECORDS_PER_SET} records; got {len(records)}",
                      "RecordSetRecordLimitExceeded")
        seen = set()
        for record in records:
            key = json.dumps(record, sort_keys=True)
            if key in seen:
                raise bad(f"duplicate record {record}")
            seen.add(key)
            if rtype == "A":
                check_fields(record, {"ipv4Address"}, "an A record")
                try:
                    ipaddress.IPv4Address(record.get("ipv4Address"))
                except ValueError:
                    raise bad(f"{record.get('ipv4Address')!r} is not an IPv4 address")
            elif rtype == "AAAA":
                check_fields(record, {"ipv6Address"}, "an AAAA record")
                try:
                    ipaddress.IPv6Address(record.get("ipv6Address"))
                except ValueError:
                    raise bad(f"{record.get('ipv6Address')!r} is not an IPv6 address")
            elif rtype == "TXT":
                check_fields(record, {"value"}, "a TXT record")
                strings = record.get("value")
                if not isinstance(strings, list) or not strings:
                    raise bad("a TXT record's value is a list of strings")
                for s in strings:
                    if not isinstance(s, str) or len(s.encode()) > 255:
                        raise bad("each string of a TXT record's value is at most 255 characters")
            elif rtype == "NS":
                check_fields(record, {"nsdname"}, "an NS record")

    def put_record_set(self, zone, name, rtype, body, if_match, if_none_match):
        sets = self.zones[zone]
        current = sets.get((name, rtype))
        if if_none_match == "*" and current is not None:
            raise ApiError(412, "PreconditionFailed",
                           f"The record set {name} of type {rtype} already exists.")
        if if_match is not None and (current is None or current["etag"] != if_match):
            raise ApiError(412, "PreconditionFailed",
                           f"The ETag of record set {name} of type {rtype} does not match.")
        self.check_record_set(zone, name, rtype, body)
        others = {t for (n, t) in sets if n == name and t != rtype}
        if rtype == "CNAME" and others:
            raise ApiError(409, "Conflict",
                           f"a CNAME record set cannot share the name {name} with {sorted(others)}")
        if rtype != "CNAME" and "CNAME" in others:
            raise ApiError(409, "Conflict",
                           f"the name {name} holds a CNAME record set, which stands alone")
        if current is None and len(sets) >= self.args.max_record_sets:
            raise ApiError(409, "QuotaExceeded",
                           f"the zone holds its maximum of {self.args.max_record_sets} record sets")
        stored = self.stored_set(zone, name, rtype, body["properties"])
        sets[(name, rtype)] = stored
        return (200 if current else 201), stored

    # --- Traffic Manager -----------------------------------------------------------------

    def check_profile(self, name, body):
        check_fields(body, {"id", "name", "type", "location", "tags", "properties"}, "the profile")
        if str(body.get("location", "")).lower() != "global":
            raise bad("a Traffic Manager profile's location must be 'global'", "LocationNotAvailableForResourceType")
        props = body.get("properties")
        check_fields(props, PROFILE_PROPERTIES, "properties")
        method = props.get("trafficRoutingMethod")
        if method not in ROUTING_METHODS:
            raise bad(f"trafficRoutingMethod {method!r} is not one of {sorted(ROUTING_METHODS)}")
        if props.get("profileStatus") not in ("Enabled", "Disabled"):
            raise bad("profileStatus must be Enabled or Disabled")
        dns = props.get("dnsConfig")
        check_fields(dns, {"relativeName", "ttl", "fqdn"}, "properties.dnsConfig")
        relative = dns.get("relativeName")
        if not isinstance(relative, str) or not RELATIVE_NAME.match(relative):
            raise bad(f"dnsConfig.relativeName {relative!r} is not a valid DNS label")
        for other_name, other in self.profiles.items():
            if other_name != name.lower() and other["properties"]["dnsConfig"]["relativeName"] == relative:
                raise ApiError(409, "Conflict",
                               f"the relative DNS name {relative} is already used by another profile")
        ttl = dns.get("ttl")
        if not isinstance(ttl, int) or not 0 <= ttl <= 2147483647:
            raise bad("dnsConfig.ttl must be an integer from 0 to 2147483647")
        monitor = props.get("monitorConfig")
        if not isinstance(monitor, dict) or monitor.get("protocol") not in ("HTTP", "HTTPS", "TCP"):
            raise bad("monitorConfig.protocol must be HTTP, HTTPS or TCP")
        if not isinstance(monitor.get("port"), int) or not 1 <= monitor["port"] <= 65535:
            raise bad("monitorConfig.port must be 1-65535")
        endpoints = props.get("endpoints", [])
        if not isinstance(endpoints, list):
            raise bad("properties.endpoints must be a list")
        if len(endpoints) > self.args.max_endpoints:
            raise bad(f"a profile holds at most {self.args.max_endpoints} endpoints", "QuotaExceeded")
        names, mapped = set(), {}
        for i, endpoint in enumerate(endpoints):
            where = f"endpoints[{i}]"
            check_fields(endpoint, {"id", "name", "type", "properties"}, where)
            ename = endpoint.get("name")
            if not isinstance(ename, str) or not ename or ename.lower() in names:
                raise bad(f"{where}: endpoint names are required and unique in a profile")
            names.add(ename.lower())
            kind = ENDPOINT_TYPES.get(str(endpoint.get("type", "")).lower())
            if kind is None:
                raise bad(f"{where}: unknown endpoint type {endpoint.get('type')!r}")
            ep = endpoint.get("properties")
            check_fields(ep, ENDPOINT_PROPERTIES, f"{where}.properties")
            if kind == "ExternalEndpoints":
                if not isinstance(ep.get("target"), str) or not ep["target"]:
                    raise bad(f"{where}: an external endpoint needs a target")
                if "targetResourceId" in ep:
                    raise bad(f"{where}: an external endpoint has no targetResourceId")
            if kind == "NestedEndpoints":
                child = self.profile_by_id(ep.get("targetResourceId"))
                if child is None:
                    raise bad(f"{where}: nested profile {ep.get('targetResourceId')!r} does not exist",
                              "InvalidTargetResource")
                if child["name"].lower() == name.lower():
                    raise bad(f"{where}: a profile cannot nest itself")
            if ep.get("endpointStatus", "Enabled") not in ("Enabled", "Disabled"):
                raise bad(f"{where}: endpointStatus must be Enabled or Disabled")
            if ep.get("alwaysServe", "Disabled") not in ("Enabled", "Disabled"):
                raise bad(f"{where}: alwaysServe must be Enabled or Disabled")
            if method == "Weighted":
                weight = ep.get("weight")
                if not isinstance(weight, int) or not 1 <= weight <= 1000:
                    raise bad(f"{where}: a Weighted profile's endpoint weight is 1 to 1000; got {weight!r}")
            elif "weight" in ep:
                raise bad(f"{where}: weight is for Weighted profiles only")
            if method == "Geographic":
                codes = ep.get("geoMapping")
                if not isinstance(codes, list) or not codes:
                    raise bad(f"{where}: a Geographic profile's endpoint needs geoMapping")
                for code in codes:
                    if code not in GEO_REGIONS and not (isinstance(code, str) and GEO_CODE.match(code)):
                        raise bad(f"{where}: {code!r} is not a Traffic Manager geographic code")
                    if code in mapped:
                        raise bad(f"{where}: {code} is already mapped to endpoint {mapped[code]}; "
                                  "a code maps to one endpoint only", "GeographicMappingAlreadyInUse")
                    mapped[code] = ename
            elif "geoMapping" in ep:
                raise bad(f"{where}: geoMapping is for Geographic profiles only")

    def put_profile(self, name, body):
        if not PROFILE_NAME.match(name):
            raise bad(f"{name!r} is not a valid profile name", "InvalidResourceName")
        self.check_profile(name, body)
        current = self.profiles.get(name.lower())
        if current is None and len(self.profiles) >= self.args.max_profiles:
            raise ApiError(409, "QuotaExceeded",
                           f"the subscription holds its maximum of {self.args.max_profiles} profiles")
        props = json.loads(json.dumps(body["properties"]))
        props["dnsConfig"]["fqdn"] = f"{props['dnsConfig']['relativeName']}.trafficmanager.net"
        for endpoint in props.get("endpoints", []):
            kind = ENDPOINT_TYPES[endpoint["type"].lower()]
            endpoint["id"] = f"{self.profile_id(name)}/{kind}/{endpoint['name']}"
            endpoint["properties"]["endpointMonitorStatus"] = "CheckingEndpoint"
        stored = {
            "id": self.profile_id(name), "name": name,
            "type": "Microsoft.Network/trafficManagerProfiles", "location": "global",
            "tags": body.get("tags", {}), "properties": props,
        }
        self.profiles[name.lower()] = stored
        return (200 if current else 201), stored

    def delete_profile(self, name):
        profile = self.profiles.get(name.lower())
        if profile is None:
            return 204
        del self.profiles[name.lower()]
        return 200


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    store = None

    def log_message(self, *args):
        pass

    def reply(self, status, body=None, headers=None):
        data = b"" if body is None else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("x-ms-request-id", str(uuid.uuid4()))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def body(self):
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def handle_any(self):
        store = self.store
        url = urlparse(self.path)
        query = parse_qs(url.query)
        raw = self.body()
        try:
            with store.lock:
                status, body, headers = self.route(store, url.path, query, raw)
        except ApiError as e:
            status, body, headers = e.status, {"error": {"code": e.code, "message": e.message}}, e.headers
        self.reply(status, body, headers)

    def route(self, store, path, query, raw):
        parts = [p for p in path.split("/") if p]
        # Entra ID.
        if self.command == "POST" and len(parts) == 4 and parts[1:] == ["oauth2", "v2.0", "token"]:
            return self.token(store, parts[0], raw)
        if store.throttle > 0:
            store.throttle -= 1
            store.count("throttled")
            raise ApiError(429, "TooManyRequests",
                           "The request is being throttled as the limit has been reached for operation type.",
                           {"Retry-After": "1"})
        auth = self.headers.get("Authorization", "")
        if not auth.startswith("Bearer ") or auth[len("Bearer "):] not in store.tokens:
            raise ApiError(401, "AuthenticationFailed", "Authentication failed. The 'Authorization' header is missing or invalid.")
        group = [p.lower() for p in store.group().split("/") if p]
        if [p.lower() for p in parts[:4]] != group:
            raise ApiError(404, "ResourceGroupNotFound", f"Resource group '{'/'.join(parts[:4])}' could not be found.")
        if len(parts) < 7 or parts[4].lower() != "providers" or parts[5].lower() != "microsoft.network":
            raise ApiError(404, "InvalidResourceType", "The resource type could not be found.")
        rest = parts[6:]
        api = rest[0].lower()
        version = query.get("api-version", [None])[0]
        expected = {"dnszones": DNS_API, "trafficmanagerprofiles": TM_API}.get(api)
        if expected is None:
            raise ApiError(404, "InvalidResourceType", f"The resource type '{rest[0]}' could not be found.")
        if version is None:
            raise ApiError(400, "MissingApiVersionParameter", "The api-version query parameter (?api-version=) is required for all requests.")
        if version != expected:
            raise ApiError(400, "InvalidApiVersionParameter", f"The api-version '{version}' is invalid; this fake serves '{expected}'.")
        body = None
        if self.command == "PUT":
            if not (self.headers.get("Content-Type") or "").startswith("application/json"):
                raise ApiError(415, "UnsupportedMediaType", "The content media type is not supported. Content-Type must be 'application/json'.")
            try:
                body = json.loads(raw)
            except ValueError:
                raise bad("The request content was invalid and could not be deserialized.", "InvalidRequestContent")
        if api == "dnszones":
            return self.dns(store, rest[1:], query, body)
        return self.traffic_manager(store, rest[1:], body)

    def token(self, store, tenant, raw):
        form = {k: v[0] for k, v in parse_qs(raw.decode()).items()}
        store.count("token")
        if tenant != store.args.tenant:
            return 400, {"error": "invalid_request", "error_description": f"AADSTS90002: Tenant '{tenant}' not found."}, {}
        if form.get("grant_type") != "client_credentials":
            return 400, {"error": "unsupported_grant_type", "error_description": "AADSTS70003"}, {}
        if form.get("client_id") != store.args.client_id:
            return 400, {"error": "unauthorized_client", "error_description": "AADSTS700016: Application not found in the directory."}, {}
        if "client_assertion" in form:
            # Workload identity: the federated (service account) token as a client assertion.
            if form.get("client_assertion_type") != "urn:ietf:params:oauth:client-assertion-type:jwt-bearer":
                return 400, {"error": "invalid_request", "error_description": "AADSTS50027: unsupported client_assertion_type."}, {}
            if form["client_assertion"] != store.args.federated_token:
                return 401, {"error": "invalid_client", "error_description": "AADSTS700213: No matching federated identity record found."}, {}
        elif form.get("client_secret") != store.args.client_secret:
            return 401, {"error": "invalid_client", "error_description": "AADSTS7000215: Invalid client secret provided."}, {}
        if not form.get("scope", "").endswith("/.default"):
            return 400, {"error": "invalid_scope", "error_description": "AADSTS70011: The scope must end in /.default."}, {}
        token = f"fake-{uuid.uuid4()}"
        store.tokens.add(token)
        return 200, {"token_type": "Bearer", "expires_in": 3599, "ext_expires_in": 3599, "access_token": token}, {}

    def dns(self, store, rest, query, body):
        if not rest:
            if self.command != "GET":
                raise ApiError(405, "MethodNotAllowed", "only GET lists zones")
            store.count("list-zones")
            return 200, {"value": [{
                "id": f"{store.group()}/providers/Microsoft.Network/dnszones/{zone}",
                "name": zone, "type": "Microsoft.Network/dnszones", "location": "global",
                "etag": "zone", "properties": {
                    "maxNumberOfRecordSets": store.args.max_record_sets,
                    "numberOfRecordSets": len(sets), "zoneType": "Public"}}
                for zone, sets in store.zones.items()]}, {}
        zone = rest[0].lower()
        if zone not in store.zones:
            raise ApiError(404, "ParentResourceNotFound", f"The DNS zone {zone} was not found.")
        sets = store.zones[zone]
        if len(rest) == 2 and rest[1].lower() in ("recordsets", "all") and self.command == "GET":
            store.count("list-record-sets")
            top = int(query.get("$top", [store.args.page_size])[0])
            skip = int(query.get("$skipToken", ["0"])[0])
            ordered = [sets[k] for k in sorted(sets)]
            page = ordered[skip:skip + top]
            result = {"value": page}
            if skip + top < len(ordered):
                result["nextLink"] = (f"https://127.0.0.1:{store.https_port}{store.group()}/providers/Microsoft.Network/dnszones/{zone}/recordsets"
                                      f"?api-version={DNS_API}&$top={top}&$skipToken={skip + top}")
            return 200, result, {}
        if len(rest) != 3:
            raise ApiError(404, "InvalidResourceType", "unknown DNS path")
        rtype, name = rest[1].upper(), rest[2].lower()
        if rtype not in TYPE_FIELDS:
            raise bad(f"record type {rest[1]} is not supported")
        if not all(LABEL.match(label) for label in name.split(".")):
            raise bad(f"{name!r} is not a valid record set name", "InvalidRecordSetName")
        if self.command == "GET":
            store.count("get-record-set")
            found = sets.get((name, rtype))
            if found is None:
                raise ApiError(404, "NotFound", f"The resource record '{name}' does not exist in resource group.")
            return 200, found, {"ETag": found["etag"]}
        if self.command == "PUT":
            store.count("put-record-set")
            if rtype == "SOA":
                raise bad("the SOA record set cannot be written")
            status, stored = store.put_record_set(zone, name, rtype, body,
                                                  self.headers.get("If-Match"), self.headers.get("If-None-Match"))
            return status, stored, {"ETag": stored["etag"]}
        if self.command == "DELETE":
            store.count("delete-record-set")
            current = sets.get((name, rtype))
            if_match = self.headers.get("If-Match")
            if if_match is not None and (current is None or current["etag"] != if_match):
                raise ApiError(412, "PreconditionFailed", f"The ETag of record set {name} of type {rtype} does not match.")
            if rtype in ("SOA",) or (rtype == "NS" and name == "@"):
                raise bad("the zone's SOA and apex NS record sets cannot be deleted")
            if current is None:
                return 204, None, {}
            del sets[(name, rtype)]
            return 200, None, {}
        raise ApiError(405, "MethodNotAllowed", f"{self.command} is not served")

    def traffic_manager(self, store, rest, body):
        if not rest:
            if self.command != "GET":
                raise ApiError(405, "MethodNotAllowed", "only GET lists profiles")
            store.count("list-profiles")
            return 200, {"value": [store.profiles[k] for k in sorted(store.profiles)]}, {}
        if len(rest) != 1:
            raise ApiError(404, "InvalidResourceType", "endpoints are written through their profile here")
        name = rest[0]
        if self.command == "GET":
            store.count("get-profile")
            found = store.profiles.get(name.lower())
            if found is None:
                raise ApiError(404, "ResourceNotFound", f"The Resource 'Microsoft.Network/trafficManagerProfiles/{name}' was not found.")
            return 200, found, {}
        if self.command == "PUT":
            store.count("put-profile")
            status, stored = store.put_profile(name, body)
            return status, stored, {}
        if self.command == "DELETE":
            store.count("delete-profile")
            return store.delete_profile(name), None, {}
        raise ApiError(405, "MethodNotAllowed", f"{self.command} is not served")

    do_GET = do_PUT = do_POST = do_DELETE = do_PATCH = handle_any


class AdminHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    store = None

    def log_message(self, *args):
        pass

    def do_GET(self):
        store = self.store
        with store.lock:
            if self.path == "/_fake/requests":
                body = dict(store.requests)
            elif self.path == "/_fake/state":
                body = {"zones": {z: [s for _, s in sorted(sets.items())] for z, sets in store.zones.items()},
                        "profiles": [store.profiles[k] for k in sorted(store.profiles)]}
            else:
                body = {"error": "unknown"}
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self):
        url = urlparse(self.path)
        if url.path == "/_fake/throttle":
            with self.store.lock:
                self.store.throttle = int(parse_qs(url.query).get("n", ["1"])[0])
        elif url.path == "/_fake/reset-requests":
            with self.store.lock:
                self.store.requests = {}
        self.send_response(204)
        self.send_header("Content-Length", "0")
        self.end_headers()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--cert", required=True)
    parser.add_argument("--key", required=True)
    parser.add_argument("--tenant", required=True)
    parser.add_argument("--client-id", required=True)
    parser.add_argument("--client-secret", required=True)
    parser.add_argument("--federated-token", required=True)
    parser.add_argument("--subscription", required=True)
    parser.add_argument("--resource-group", required=True)
    parser.add_argument("--zone", action="append", default=[])
    parser.add_argument("--page-size", type=int, default=100)
    # Azure's documented defaults: 10,000 record sets per public zone, 200 Traffic Manager
    # profiles per subscription, 200 endpoints per profile.
    parser.add_argument("--max-record-sets", type=int, default=10000)
    parser.add_argument("--max-profiles", type=int, default=200)
    parser.add_argument("--max-endpoints", type=int, default=200)
    args = parser.parse_args()
    store = Store(args)
    Handler.store = store
    AdminHandler.store = store
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(args.cert, args.key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    store.https_port = server.server_address[1]
    admin = ThreadingHTTPServer(("127.0.0.1", 0), AdminHandler)
    threading.Thread(target=admin.serve_forever, daemon=True).start()
    print(f"listening on {server.server_address[1]} {admin.server_address[1]}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
