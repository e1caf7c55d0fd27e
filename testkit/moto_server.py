"""moto's server with one correction, for Meridian's Route53 tests.

moto (5.2.5) deletes a record set that has a SetIdentifier by that identifier alone, so deleting
`klb.a.example.com` with identifier "default" also deletes `klb.b.example.com` "default". Route53
itself keys record sets on name, type and identifier. This wrapper makes moto's delete match all
three, and changes nothing else.
"""

import sys

import moto.route53.models as route53
from moto.server import main

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

if __name__ == "__main__":
    sys.exit(main())
