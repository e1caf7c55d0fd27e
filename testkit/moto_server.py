"""moto's server with one correction, for Meridian's Route53 tests.

The server binds a free loopback port itself and prints it on its first line: a port picked by
the caller and handed over would be free only until another test picked it too, and two moto
servers on one port answer each other's tests.

moto (5.2.5) deletes a record set that has a SetIdentifier by that identifier alone, so deleting
`klb.a.example.com` with identifier "default" also deletes `klb.b.example.com` "default". Route53
itself keys record sets on name, type and identifier. This wrapper makes moto's delete match all
three, and changes nothing else.
"""

import os
import sys

import moto.route53.models as route53
from moto.moto_server.werkzeug_app import (
    DomainDispatcherApplication,
    MotoRequestHandler,
    create_backend_app,
)
from werkzeug.serving import make_server

_change_resource_record_sets = route53.Route53Backend.change_resource_record_sets


def change_resource_record_sets(self, zoneid, change_list):
    zone = self.get_hosted_zone(zoneid)
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
    try:
        return _change_resource_record_sets(self, zoneid, change_list)
    finally:
        del zone.delete_rrset_by_id


route53.Route53Backend.change_resource_record_sets = change_resource_record_sets


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
