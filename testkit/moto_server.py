"""moto's server with two corrections, for Meridian's Route53 tests.

The server binds a free loopback port itself and prints it on its first line: a port picked by
the caller and handed over would be free only until another test picked it too, and two moto
servers on one port answer each other's tests.

moto (5.2.5) differs from Route53 in three ways this wrapper corrects, changing nothing else:

- It deletes a record set that has a SetIdentifier by that identifier alone, so deleting
  `klb.a.example.com` with identifier "default" also deletes `klb.b.example.com` "default".
  Route53 keys record sets on name, type and identifier.
- It checks a change batch against its journal of past changes, not the zone: a DELETE passes
  when the values were ever written (the current ones may differ), and a CREATE fails when the
  same CREATE was ever sent, even after the record was deleted. Route53 checks a batch's changes
  in order against the zone as it stands: a DELETE must match the record set exactly (TTL,
  values in any order, weight, location), and a CREATE must find none. Meridian relies on that
  for updates that must not overwrite another writer's. The wrapper checks that first (moto's
  own DELETE check still runs after it, and passes for what the zone holds), and hands moto a
  CREATE as an UPSERT, which moto applies the same way without its journal check.
- It applies a batch change by change and, refusing one, keeps those before it. Route53
  applies a batch whole or not at all: the wrapper restores the zone when moto refuses, and
  takes one batch at a time (the server is threaded, and two batches checked at once could
  both pass), with listings in between.
"""

import os
import sys
import threading

import moto.route53.models as route53
from moto.route53.exceptions import Route53ClientError
from moto.moto_server.werkzeug_app import (
    DomainDispatcherApplication,
    MotoRequestHandler,
    create_backend_app,
)
from werkzeug.serving import make_server

_change_resource_record_sets = route53.Route53Backend.change_resource_record_sets


def _key(name, record_type, set_identifier):
    return (name.rstrip(".").lower(), record_type, set_identifier)


def _content(ttl, values, weight, geo_location, alias_target):
    """What a DELETE must match, compared as Route53 compares it: values in any order."""
    return (
        None if ttl is None else str(ttl),
        sorted(values or []),
        None if weight is None else str(weight),
        geo_location,
        alias_target,
    )


def _refuse_what_route53_refuses(zone, change_list):
    """Raises Route53's InvalidChangeBatch for the first change that does not apply to the zone
    as the changes before it leave it."""
    standing = {
        _key(r.name, r.type, r.set_identifier): _content(r.ttl, r.records, r.weight, r.geo_location, r.alias_target)
        for r in zone.rrsets
    }
    for change in change_list:
        rrset = change["ResourceRecordSet"]
        key = _key(rrset["Name"], rrset["Type"], rrset.get("SetIdentifier"))
        values = [record["Value"] for record in rrset.get("ResourceRecords") or []]
        content = _content(rrset.get("TTL"), values, rrset.get("Weight"), rrset.get("GeoLocation"), rrset.get("AliasTarget"))
        what = f"resource record set [name='{key[0]}.', type='{key[1]}'" + (f", set-identifier='{key[2]}'" if key[2] else "") + "]"
        if change["Action"] == "DELETE":
            if key not in standing:
                raise Route53ClientError("InvalidChangeBatch", f"[Tried to delete {what} but it was not found]")
            if standing[key] != content:
                raise Route53ClientError(
                    "InvalidChangeBatch",
                    f"[Tried to delete {what} but the values provided do not match the current values]",
                )
            del standing[key]
        elif change["Action"] == "CREATE":
            if key in standing:
                raise Route53ClientError("InvalidChangeBatch", f"[Tried to create {what} but it already exists]")
            standing[key] = content
        else:
            standing[key] = content


_one_batch_at_a_time = threading.Lock()
_list_resource_record_sets = route53.Route53Backend.list_resource_record_sets


def change_resource_record_sets(self, zoneid, change_list):
    with _one_batch_at_a_time:
        return _change_whole_or_not_at_all(self, zoneid, change_list)


def list_resource_record_sets(self, *args, **kwargs):
    # A listing never sees a batch half applied (and then restored).
    with _one_batch_at_a_time:
        return _list_resource_record_sets(self, *args, **kwargs)


def _change_whole_or_not_at_all(self, zoneid, change_list):
    zone = self.get_hosted_zone(zoneid)
    _refuse_what_route53_refuses(zone, change_list)
    # Checked above against the zone itself; moto's own CREATE check (its journal) would refuse
    # a CREATE sent once before, so moto is handed an UPSERT, which it applies the same way.
    for change in change_list:
        if change["Action"] == "CREATE":
            change["Action"] = "UPSERT"
    # moto calls delete_rrset_by_id once per DELETE with a SetIdentifier, in order.
    pending = [
        change["ResourceRecordSet"]
        for change in change_list
        if change["Action"] == "DELETE" and "SetIdentifier" in change["ResourceRecordSet"]
    ]

    def delete_exactly(set_identifier):
        target = pending.pop(0)
        name = target["Name"] if target["Name"].endswith(".") else target["Name"] + "."
        zone.rrsets = [
            record
            for record in zone.rrsets
            if not (record.name == name and record.type == target["Type"] and record.set_identifier == set_identifier)
        ]

    zone.delete_rrset_by_id = delete_exactly
    before = (list(zone.rrsets), list(zone.rr_changes))
    try:
        return _change_resource_record_sets(self, zoneid, change_list)
    except Exception:
        zone.rrsets = before[0]
        zone.rr_changes[:] = before[1]
        raise
    finally:
        del zone.delete_rrset_by_id


route53.Route53Backend.change_resource_record_sets = change_resource_record_sets
route53.Route53Backend.list_resource_record_sets = list_resource_record_sets


def serve():
    server = make_server(
        "127.0.0.1",
        0,
        DomainDispatcherApplication(create_backend_app),
        threaded=True,
        request_handler=MotoRequestHandler,
    )
    os.environ["MOTO_PORT"] = str(server.port)
    # Listening already: the port is also the sign that the server is ready.
    print(server.port, flush=True)
    # The reader stops at that line: anything later goes nowhere rather than to a closed pipe.
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    server.serve_forever()


if __name__ == "__main__":
    sys.exit(serve())
